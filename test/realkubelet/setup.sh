#!/bin/bash
# Installs the Debian 12 packages the real-kubelet suite (test/realkubelet/run.sh) needs. run.sh builds
# the kubelet and kube-apiserver once (cached; build-kubelet.sh, build-apiserver.sh). Idempotent: apt
# runs only when a package is missing.
set -euo pipefail
PACKAGES=(
  containerd runc containernetworking-plugins golang-go golang-github-modern-go-reflect2-dev
  busybox-static jq curl gcc libc6-dev iproute2 util-linux dpkg-dev
  etcd-server openssl  # the control plane (kube-api.sh): etcd 3.4; keys and certificates
)
missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [[ $status == ii* ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "realkubelet setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "realkubelet setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  # Debian starts containerd and etcd as services on install (where systemd runs); the suite runs
  # its own private ones, in its own network namespace.
else
  echo "realkubelet setup: all ${#PACKAGES[@]} packages installed"
fi
