# shellcheck shell=bash
# test/realkubelet/k8s-source.sh: the Kubernetes v1.20.2 tree that build-kubelet.sh and
# build-apiserver.sh build from (Debian 12's `kubernetes` source package), in one shared work folder
# with one Go cache, so the second binary reuses what the first compiled. Source it, then:
#
#   k8s_src_lock             take the work folder's lock (fd 9); builds of the two binaries take turns.
#   k8s_src_prepare          fetch (private apt configuration) and unpack the tree once, with the
#                            vendored reflect2 swapped; sets K8S_SRC. Returns 2 when a part cannot be had.
#   k8s_gopath_env           export the GOPATH-mode build environment and cd into the tree.
#   k8s_go_build PKG OUT     go build -p 1 of a cmd/ package with the version stamped.
#
# Sets K8S_VERSION (v1.20.2), K8S_CACHE (${FABRIC_TEST_CACHE:-/var/cache/fabric-test}) and K8S_WORK
# ($K8S_CACHE/kubelet/work: the source, GOPATH and Go cache; about 1.2 GB after the kubelet, 1.6 GB
# after both). Messages go to stderr.
#
# - The source is fetched with its own deb-src list, lists and cache folders; the system's apt
#   sources are not touched.
# - The vendored github.com/modern-go/reflect2 1.0.1 crashes at run time on Go >= 1.18; it is replaced
#   with Debian's golang-github-modern-go-reflect2-dev 1.0.2 (installed, or fetched with apt-get download).
# - GOPATH mode (GO111MODULE=off, as v1.20's hack/ scripts do; module mode fails with "go: updates to
#   go.mod needed"), CGO_ENABLED=0, Go 1.19, -p 1.
K8S_VERSION=v1.20.2
K8S_CACHE=${FABRIC_TEST_CACHE:-/var/cache/fabric-test}
K8S_WORK=$K8S_CACHE/kubelet/work

k8s_src_lock() {
  mkdir -p "$K8S_CACHE/kubelet"
  exec 9>"$K8S_CACHE/kubelet/.lock"
  flock 9
}

# The mirror the machine's apt already uses.
k8s_mirror() {
  local m=${DEBIAN_MIRROR:-}
  if [[ -z $m ]]; then
    m=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
          /etc/apt/sources.list.d/*.list 2>/dev/null |
        grep -oE 'https?://[^ ]*/debian/?' | grep -v security | head -1 || true)
    m=${m%/}
    [[ -n $m ]] || m=http://deb.debian.org/debian
  fi
  echo "$m"
}

k8s_src_prepare() {
  command -v go >/dev/null || { echo "k8s-source: no go toolchain" >&2; return 2; }
  command -v apt-get >/dev/null || { echo "k8s-source: no apt-get" >&2; return 2; }
  local W=$K8S_WORK A=$K8S_WORK/apt mirror orig signed="" r2sys r2deb
  mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$W/dl"
  mirror=$(k8s_mirror)
  [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] &&
    signed="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
  echo "deb-src ${signed}${mirror} bookworm main" >"$A/sources.list"
  local apt=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o Debug::NoLocking=1)
  orig=$(ls "$W"/dl/kubernetes_*.orig.tar.* 2>/dev/null | head -1 || true)
  if [[ -z $orig ]]; then
    echo "k8s-source: fetching Debian's kubernetes source from $mirror" >&2
    apt-get "${apt[@]}" -qq update >&2 || { echo "k8s-source: apt-get update (deb-src) failed" >&2; return 2; }
    (cd "$W/dl" && apt-get "${apt[@]}" -qq source --download-only kubernetes >&2) ||
      { echo "k8s-source: apt-get source kubernetes failed" >&2; return 2; }
    orig=$(ls "$W"/dl/kubernetes_*.orig.tar.* | head -1)
  fi
  r2sys=/usr/share/gocode/src/github.com/modern-go/reflect2
  r2deb=$(ls "$W"/dl/golang-github-modern-go-reflect2-dev_*.deb 2>/dev/null | head -1 || true)
  if [[ ! -d $r2sys && -z $r2deb ]]; then
    (cd "$W/dl" && apt-get -qq download golang-github-modern-go-reflect2-dev >&2) ||
      { echo "k8s-source: apt-get download golang-github-modern-go-reflect2-dev failed" >&2; return 2; }
    r2deb=$(ls "$W"/dl/golang-github-modern-go-reflect2-dev_*.deb | head -1)
  fi
  K8S_SRC=$W/src
  if [[ ! -f $K8S_SRC/.unpacked ]]; then
    rm -rf "$K8S_SRC" && mkdir -p "$K8S_SRC"
    echo "k8s-source: unpacking $(basename "$orig")" >&2
    tar -xf "$orig" -C "$K8S_SRC" --strip-components=1 || return 1
    if [[ ! -d $r2sys ]]; then
      rm -rf "$W/r2" && mkdir -p "$W/r2" && dpkg -x "$r2deb" "$W/r2"
      r2sys=$W/r2$r2sys
    fi
    rm -rf "$K8S_SRC/vendor/github.com/modern-go/reflect2"
    cp -a "$r2sys" "$K8S_SRC/vendor/github.com/modern-go/reflect2"
    rm -f "$K8S_SRC/vendor/github.com/modern-go/reflect2/go.mod" "$K8S_SRC/vendor/github.com/modern-go/reflect2/go.sum"
    touch "$K8S_SRC/.unpacked"
  fi
}

k8s_gopath_env() {
  export GOPATH=$K8S_WORK/gopath GOCACHE=$K8S_WORK/gocache GO111MODULE=off GOFLAGS= GOTOOLCHAIN=local \
         GOPROXY=off CGO_ENABLED=0
  mkdir -p "$GOPATH/src/k8s.io"
  ln -sfn "$K8S_WORK/src" "$GOPATH/src/k8s.io/kubernetes"
  cd "$GOPATH/src/k8s.io/kubernetes" || return 1
}

k8s_go_build() {  # PKG OUT
  # Both version packages, as hack/lib/version.sh stamps them: component-base's (--version, the Node's
  # kubeletVersion) and client-go's (the API server's /version, user agents).
  local p flags="-s -w"
  for p in component-base/version client-go/pkg/version; do
    flags+=" -X k8s.io/kubernetes/vendor/k8s.io/$p.gitVersion=$K8S_VERSION"
    flags+=" -X k8s.io/kubernetes/vendor/k8s.io/$p.gitMajor=1 -X k8s.io/kubernetes/vendor/k8s.io/$p.gitMinor=20"
  done
  go build -p 1 -tags selinux,notest -ldflags "$flags" -o "$2.tmp" "$1" >&2 && mv "$2.tmp" "$2"
}
