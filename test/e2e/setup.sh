#!/bin/bash
# Installs the Debian 12 packages the real-kernel e2e suite (test/e2e/run.sh)
# needs. Idempotent: apt is skipped when every package is already installed.
# linux-image-amd64 is installed only for its files (/boot/vmlinuz-*,
# /lib/modules/*/rdma_rxe.ko); the host keeps running its own kernel.
set -euo pipefail
PACKAGES=(
  qemu-system-x86 linux-image-amd64 busybox-static cpio kmod iproute2
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils libfabric-bin
  runc jq
  containerd curl gcc libc6-dev  # 09-real-kubelet: containerd + ctr in the VM, the pause image on the host
  containernetworking-plugins    # 10-observe: bridge, host-local, loopback for the Pods' own netns
)
missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ $status == ii* ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "e2e setup: all ${#PACKAGES[@]} packages installed"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "e2e setup: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "e2e setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
