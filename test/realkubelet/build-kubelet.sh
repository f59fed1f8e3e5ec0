#!/bin/bash
# Builds a real kubelet v1.20.2 from Debian 12's `kubernetes` source package and caches it at
#   ${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet/kubelet-v1.20.2
# Rebuilds only when the cached binary is missing. Prints the binary path on the last line of stdout.
# The source tree, its fetch and the GOPATH build environment are shared with build-apiserver.sh
# (k8s-source.sh). About 5 minutes on one core, about 1.3 GB peak memory.
# Exit codes: 0 built or cached; 2 a part cannot be had (no go / no apt source); 1 build failed.
set -euo pipefail
# shellcheck source=k8s-source.sh
source "$(dirname "$(realpath "$0")")/k8s-source.sh"
OUT=$K8S_CACHE/kubelet/kubelet-$K8S_VERSION

if [[ -x $OUT ]]; then
  echo "$OUT"
  exit 0
fi
k8s_src_lock
if [[ -x $OUT ]]; then echo "$OUT"; exit 0; fi   # another run built it while we waited
rc=0
k8s_src_prepare || rc=$?
((rc == 0)) || exit "$rc"
k8s_gopath_env
echo "build-kubelet: go build cmd/kubelet (about 5 minutes on one core)" >&2
start=$(date +%s)
k8s_go_build k8s.io/kubernetes/cmd/kubelet "$OUT"
echo "build-kubelet: built in $(( $(date +%s) - start )) s" >&2
# The source and the go cache (about 1.2 GB) are kept so a rebuild is quick; KUBELET_BUILD_CLEAN=1 drops them.
[[ ${KUBELET_BUILD_CLEAN:-0} == 1 ]] && rm -rf "$K8S_WORK"
echo "$OUT"
