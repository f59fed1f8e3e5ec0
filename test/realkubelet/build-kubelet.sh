#!/bin/bash
# Builds a real kubelet v1.20.2 from Debian 12's `kubernetes` source package and caches it at
#   ${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet/kubelet-v1.20.2
# Rebuilds only when the cached binary is missing. Prints the binary path on the last line of stdout.
#
# - The source is fetched with a private apt configuration (its own deb-src list, lists and cache
#   folders); the system's apt sources are not touched.
# - The vendored github.com/modern-go/reflect2 1.0.1 crashes at run time on Go >= 1.18; it is replaced
#   with Debian's golang-github-modern-go-reflect2-dev 1.0.2.
# - GOPATH mode (GO111MODULE=off, as v1.20's hack/ scripts do), CGO_ENABLED=0, Go 1.19, -p 1.
#   About 5 minutes on one core, about 1.3 GB peak memory.
# Exit codes: 0 built or cached; 2 a part cannot be had (no go / no apt source); 1 build failed.
set -euo pipefail

CACHE=${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet
VERSION=v1.20.2
OUT=$CACHE/kubelet-$VERSION
MIRROR=${DEBIAN_MIRROR:-}

if [[ -x $OUT ]]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || { echo "build-kubelet: no go toolchain" >&2; exit 2; }
command -v apt-get >/dev/null || { echo "build-kubelet: no apt-get" >&2; exit 2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [[ -x $OUT ]]; then echo "$OUT"; exit 0; fi   # another run built it while we waited

W=$CACHE/work
mkdir -p "$W"

# ---- the mirror the machine's apt already uses ------------------------------------------------
if [[ -z $MIRROR ]]; then
  MIRROR=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
             /etc/apt/sources.list.d/*.list 2>/dev/null |
           grep -oE 'https?://[^ ]*/debian/?' | grep -v security | head -1 || true)
  MIRROR=${MIRROR%/}
  [[ -n $MIRROR ]] || MIRROR=http://deb.debian.org/debian
fi

# ---- fetch the source with a private apt configuration ----------------------------------------
A=$W/apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$W/dl"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
SIGNED=""
[[ -r $KEYRING ]] && SIGNED="[signed-by=$KEYRING] "
echo "deb-src ${SIGNED}${MIRROR} bookworm main" >"$A/sources.list"
APT=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o Debug::NoLocking=1)

ORIG=$(ls "$W"/dl/kubernetes_*.orig.tar.* 2>/dev/null | head -1 || true)
if [[ -z $ORIG ]]; then
  echo "build-kubelet: fetching Debian's kubernetes source from $MIRROR" >&2
  apt-get "${APT[@]}" -qq update >&2 || { echo "build-kubelet: apt-get update (deb-src) failed" >&2; exit 2; }
  (cd "$W/dl" && apt-get "${APT[@]}" -qq source --download-only kubernetes >&2) ||
    { echo "build-kubelet: apt-get source kubernetes failed" >&2; exit 2; }
  ORIG=$(ls "$W"/dl/kubernetes_*.orig.tar.* | head -1)
fi

R2DEB=$(ls "$W"/dl/golang-github-modern-go-reflect2-dev_*.deb 2>/dev/null | head -1 || true)
if [[ -z $R2DEB ]]; then
  (cd "$W/dl" && apt-get -qq download golang-github-modern-go-reflect2-dev >&2) ||
    { echo "build-kubelet: apt-get download golang-github-modern-go-reflect2-dev failed" >&2; exit 2; }
  R2DEB=$(ls "$W"/dl/golang-github-modern-go-reflect2-dev_*.deb | head -1)
fi

# ---- unpack ------------------------------------------------------------------------------------
SRC=$W/src
if [[ ! -f $SRC/.unpacked ]]; then
  rm -rf "$SRC" && mkdir -p "$SRC"
  echo "build-kubelet: unpacking $(basename "$ORIG")" >&2
  tar -xf "$ORIG" -C "$SRC" --strip-components=1
  rm -rf "$W/r2" && mkdir -p "$W/r2" && dpkg -x "$R2DEB" "$W/r2"
  rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
  cp -a "$W/r2/usr/share/gocode/src/github.com/modern-go/reflect2" "$SRC/vendor/github.com/modern-go/"
  rm -f "$SRC/vendor/github.com/modern-go/reflect2/go.mod" "$SRC/vendor/github.com/modern-go/reflect2/go.sum"
  touch "$SRC/.unpacked"
fi

# ---- build ---------------------------------------------------------------------------------------
export GOPATH=$W/gopath GOCACHE=$W/gocache GO111MODULE=off GOFLAGS= GOTOOLCHAIN=local GOPROXY=off \
       CGO_ENABLED=0
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$SRC" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"
echo "build-kubelet: go build cmd/kubelet (about 5 minutes on one core)" >&2
start=$(date +%s)
go build -p 1 -tags selinux,notest \
  -ldflags "-s -w -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitMajor=1 -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitMinor=20" \
  -o "$OUT.tmp" k8s.io/kubernetes/cmd/kubelet >&2
mv "$OUT.tmp" "$OUT"
echo "build-kubelet: built in $(( $(date +%s) - start )) s" >&2
# The source and the go cache (about 1.2 GB) are kept so a rebuild is quick; KUBELET_BUILD_CLEAN=1 drops them.
[[ ${KUBELET_BUILD_CLEAN:-0} == 1 ]] && rm -rf "$W"
echo "$OUT"
