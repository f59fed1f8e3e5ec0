#!/bin/bash
# Builds a real kube-apiserver v1.20.2 from the same Debian 12 `kubernetes` source tree, GOPATH and Go
# cache as the kubelet (k8s-source.sh) and caches it at
#   ${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kube-apiserver/kube-apiserver-v1.20.2
# Rebuilds only when the cached binary is missing. Prints the binary path on the last line of stdout.
#
# The tarball lacks what `make` generates first: pkg/generated/openapi/zz_generated.openapi.go
# (without it: "undefined: openapi.GetOpenAPIDefinitions"). It is generated here as
# build/root/Makefile.generated_files does: openapi-gen from vendor/, run over every package with a
# `+k8s:openapi-gen=` tag in a file that carries a `// +k8s:` comment tag, outside vendor/ (staging/src
# counted as vendor/), code-generator and sample-apiserver left out. The aggregator's and
# apiextensions' generated files are already in staging/.
# Exit codes: 0 built or cached; 2 a part cannot be had (no go / no apt source); 1 build failed.
set -euo pipefail
# shellcheck source=k8s-source.sh
source "$(dirname "$(realpath "$0")")/k8s-source.sh"
OUT=$K8S_CACHE/kube-apiserver/kube-apiserver-$K8S_VERSION

if [[ -x $OUT ]]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$(dirname "$OUT")"
k8s_src_lock
if [[ -x $OUT ]]; then echo "$OUT"; exit 0; fi   # another run built it while we waited
rc=0
k8s_src_prepare || rc=$?
((rc == 0)) || exit "$rc"
k8s_gopath_env
start=$(date +%s)

GEN=pkg/generated/openapi/zz_generated.openapi.go
if [[ ! -s $GEN ]]; then
  echo "build-apiserver: generating $GEN with openapi-gen" >&2
  go build -p 1 -o "$K8S_WORK/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen >&2
  dirs=$(cd "$K8S_WORK/src" &&
    find . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune -o -type f -name '*.go' -print0 |
    xargs -0 grep -l -E '^// *\+k8s:' | xargs grep -l -F '+k8s:openapi-gen=' |
    sed 's|^\./staging/src/|vendor/|; s|^\./||; s|/[^/]*$||' | LC_ALL=C sort -u |
    grep -v -E '^vendor/k8s\.io/(code-generator|sample-apiserver)/' | sed 's|^|k8s.io/kubernetes/|' | paste -sd,)
  [[ -n $dirs ]] || { echo "build-apiserver: no +k8s:openapi-gen packages found" >&2; exit 1; }
  echo "build-apiserver: openapi-gen over $(tr ',' '\n' <<<"$dirs" | wc -l) packages" >&2
  "$K8S_WORK/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$K8S_WORK/openapi-violations.report" >&2
  [[ -s $GEN ]] || { echo "build-apiserver: openapi-gen wrote no $GEN" >&2; exit 1; }
  echo "build-apiserver: $GEN: $(stat -c %s "$GEN") bytes, $(( $(date +%s) - start )) s" >&2
fi

echo "build-apiserver: go build cmd/kube-apiserver (about 7 minutes on one core after the kubelet)" >&2
k8s_go_build k8s.io/kubernetes/cmd/kube-apiserver "$OUT"
echo "build-apiserver: built in $(( $(date +%s) - start )) s" >&2
echo "$OUT"
