#!/bin/bash
# The real-kubelet suite: a real kubelet v1.20.2 (built from Debian 12's source, cached), Debian's
# containerd and runc, and a real control plane (Debian's etcd 3.4 and kube-apiserver v1.20.2 from the
# same source, cached; Node,RBAC authorization; the kubelet registered as a Node), all in a private
# mount + network namespace, and fabric-agent from BUILD_DIR serving a fake node (a sample sysfs tree
# from test/testdata/nodes and real mknod'ed character devices bind-mounted over /dev/infiniband).
# Cases: cases/NN-*.sh (issue 10; the API server: issue 25). The cases use static Pods (also mirror
# Pods in the API) and Pods created through the API with spec.nodeName (no scheduler).
# A case with a "# rk: needs the API server" line SKIPs, with the reason, when the control plane
# cannot be had (no etcd-server, or kube-apiserver cannot be built); the others then run standalone.
#
# Usage: test/realkubelet/run.sh BUILD_DIR [OUTDIR]
#   Prints "realkubelet: PASS|FAIL <case>[: why]" per case and a closing "N passed, N failed".
#   Exit 1 on any failure. Where a part cannot be had (not root, no containerd/runc/CNI plugins,
#   no kubelet and it cannot be built) it prints one "realkubelet: SKIP <reason>" line and exits 0.
# Env: RK_CASES="1 4" (subset by number), RK_NODE_TREE (default p6-b200.48xlarge), RK_KEEP=1 (keep
#   the work dir), RK_VERBOSE=1 (print every case log), FABRIC_TEST_CACHE (default /var/cache/fabric-test).
set -uo pipefail
HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../..")
BUILD_DIR=$(realpath -m "${1:?usage: run.sh BUILD_DIR [OUTDIR]}")
OUTDIR=$(realpath -m "${2:-$(mktemp -d /tmp/fabric-realkubelet.XXXXXX)}")
TREE=$ROOT/test/testdata/nodes/${RK_NODE_TREE:-p6-b200.48xlarge}
T0=$(date +%s.%N)

skip_all() { echo "realkubelet: SKIP $*"; exit 0; }
fail_setup() {
  echo "realkubelet: FAIL setup: $*"
  echo "0 passed, 1 failed"
  exit 1
}

# shellcheck source=lib.sh
source "$HERE/lib.sh"

AGENT=$BUILD_DIR/agent/daemon/fabric-agent
FABRICCTL=$BUILD_DIR/tools/fabricctl/fabricctl
FABRIC_CNI=$BUILD_DIR/plugin/cni/fabric-cni
for b in "$AGENT" "$FABRICCTL" "$FABRIC_CNI"; do
  [[ -x $b ]] || fail_setup "$b not built"
done
[[ -d $TREE/sys ]] || fail_setup "no sample node tree $TREE"

# ---- the parts --------------------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || skip_all "needs root (namespaces, cgroups, mknod)"
mkdir -p "$OUTDIR"
[[ -x ${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet/kubelet-v1.20.2 ]] ||
  echo "realkubelet: building kubelet v1.20.2 once (about 5 min on an idle core; cached afterwards)"
RK_KUBELET=$("$HERE/build-kubelet.sh" 2>"$OUTDIR/build-kubelet.log" | tail -1)
rc=$?
if [[ $rc != 0 ]]; then
  [[ $rc == 2 ]] && skip_all "no kubelet: $(tail -1 "$OUTDIR/build-kubelet.log")"
  tail -20 "$OUTDIR/build-kubelet.log"
  fail_setup "kubelet build failed"
fi
export RK_KUBELET
# The control plane: kube-apiserver from the same source and Go cache (about 7 min more, once).
[[ -x ${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kube-apiserver/kube-apiserver-v1.20.2 ]] ||
  echo "realkubelet: building kube-apiserver v1.20.2 once (about 7 min on an idle core; cached afterwards)"
RK_APISERVER_BIN=$("$HERE/build-apiserver.sh" 2>"$OUTDIR/build-apiserver.log" | tail -1)
rc=$?
NO_API=""
if [[ $rc == 1 ]]; then
  tail -20 "$OUTDIR/build-apiserver.log"
  fail_setup "kube-apiserver build failed"
elif [[ $rc != 0 ]]; then
  NO_API="no kube-apiserver: $(tail -1 "$OUTDIR/build-apiserver.log")"
fi
export RK_APISERVER_BIN
# Short: containerd's socket path must stay under 108 bytes.
WORK=$(mktemp -d /var/tmp/frk.XXXXXX)
RK_DEV_IB=$WORK/dev-ib
export RK_DEV_IB
rk_init "$WORK" rk-node
why=$(rk_check_parts) || { rm -rf "$WORK"; skip_all "$why"; }
[[ -z $NO_API ]] && { NO_API=$(api_check_parts) || true; }
RK_CONTROL_PLANE=1
[[ -n $NO_API ]] && { RK_CONTROL_PLANE=0; echo "realkubelet: note: no control plane ($NO_API); the kubelet runs standalone and the API cases skip"; }

# ---- fake node: real char devices with the tree's numbers --------------------------------------------
make_dev_nodes "$TREE/sys" "$RK_DEV_IB"

# ---- CNI: bridge + host-local, fabric-cni chained last (behind a wrapper that records each call) --------
AGENT_SOCK=$WORK/agent.sock
CNI_CALLS=$WORK/cni-calls
mkdir -p "$CNI_CALLS"
cp "$FABRIC_CNI" "$WORK/fabric-cni.real"
cat >"$WORK/fabric-cni" <<EOF
#!/bin/sh
# Test wrapper: records what containerd sent (command, env, stdin, stdout, exit code), then runs the
# real fabric-cni with exactly that input.
n=\$(date +%s%N)-\$\$
d='$CNI_CALLS'/\$n
mkdir -p "\$d"
env | grep -E '^CNI_' >"\$d/env"
cat >"\$d/stdin"
'$WORK/fabric-cni.real' <"\$d/stdin" >"\$d/stdout" 2>"\$d/stderr"
rc=\$?
echo \$rc >"\$d/rc"
echo "\$CNI_COMMAND" >"\$d/command"
cat "\$d/stdout"
exit \$rc
EOF
chmod +x "$WORK/fabric-cni"
RK_CNI_BIN_EXTRA="$WORK/fabric-cni"
cat >"$WORK/10-rk.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rk-net",
  "plugins": [
    { "type": "bridge", "bridge": "rk0", "isGateway": true, "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.99.0.0/24" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "fabric-cni", "agentSocket": "$AGENT_SOCK", "logFile": "$WORK/fabric-cni.log",
      "logLevel": "debug" }
  ]
}
EOF
RK_CNI_CONFLIST=$WORK/10-rk.conflist
export RK_CNI_CONFLIST RK_CNI_BIN_EXTRA AGENT_SOCK CNI_CALLS

# ---- suite helpers (used by the cases) ----------------------------------------------------------------
agent_log() { echo "$RK_WORK/agent-$(cat "$RK_WORK/agent.n" 2>/dev/null || echo 0).log"; }
# RK_AGENT_EXTRA: more agent flags, split on spaces (a case that needs --observe, --pod-conditions).
# shellcheck disable=SC2086
start_agent() {
  local n
  n=$(($(cat "$RK_WORK/agent.n" 2>/dev/null || echo 0) + 1))
  echo "$n" >"$RK_WORK/agent.n"
  date +%s.%N >"$RK_WORK/agent-$n.started"
  touch "$RK_WORK/agent.started"  # wait_capacity trusts only what the kubelet learnt after this
  ns_spawn agent "$(agent_log)" "$AGENT" --sysfs-root "$TREE/sys" --dev-root /dev \
    --kubelet-root /var/lib/kubelet --metrics-address 127.0.0.1:9435 \
    --state-dir "$RK_WORK/agent-state" --cdi-dir "$RK_WORK/cdi" --agent-socket "$AGENT_SOCK" \
    --memlock-hook-path "" --log-level "${RK_AGENT_LOG_LEVEL:-info}" ${RK_AGENT_EXTRA:-}
}
stop_agent() { ns_stop agent; }
metrics() { in_ns curl -sf -m 5 http://127.0.0.1:9435/metrics; }
agent_node() { in_ns curl -sf -m 5 http://127.0.0.1:9435/v1/node; }
checkpoint() { cat "$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint" 2>/dev/null; }
# Device IDs the kubelet's checkpoint holds for Pod NAME (all resources, or one). DeviceIDs is a
# NUMA-node -> list map (DevicesPerNUMA) in v1.20; older kubelets wrote a plain list.
pod_device_ids() {  # NAME [RESOURCE]
  local uid
  uid=$(pod_uid "$1")
  checkpoint | jq -r --arg u "$uid" --arg r "${2:-}" \
    '.Data.PodDeviceEntries[]? | select(.PodUID == $u) | select($r == "" or .ResourceName == $r) |
     .DeviceIDs | if type == "object" then [.[][]] else . end | .[]' |
    sort
}
# The same for a Pod that runs and must hold devices: retries while the answer is empty (the kubelet's
# /pods and its checkpoint are read separately, and once came back empty for a running Pod).
wait_pod_device_ids() {  # NAME RESOURCE [TIMEOUT_S]
  local i ids
  for ((i = 0; i < ${3:-15} * 4; i++)); do
    ids=$(pod_device_ids "$1" "$2")
    [[ -n $ids ]] && { echo "$ids"; return 0; }
    sleep 0.25
  done
  echo "wait_pod_device_ids: $1 holds no $2 after ${3:-15}s (uid '$(pod_uid "$1")'; checkpoint entries: $(checkpoint |
    jq -c '[.Data.PodDeviceEntries[]? | {p: .PodUID[0:8], r: .ResourceName}]' 2>/dev/null))" >&2
  return 1
}
# The fake node: RDMA device name -> uverbsN; uverbsN -> "maj:min".
uverbs_of() { local u; for u in "$TREE"/sys/class/infiniband_verbs/uverbs*; do
  [[ $(cat "$u/ibdev") == "$1" ]] && basename "$u"; done; }
efa_devices() { local d; for d in "$TREE"/sys/class/infiniband/*; do
  [[ $(cat "$d/device/vendor" 2>/dev/null) == 0x1d0f ]] && basename "$d"; done; }
rdma_devices() { local d; for d in "$TREE"/sys/class/infiniband/*; do
  [[ $(cat "$d/device/vendor" 2>/dev/null) != 0x1d0f ]] && basename "$d"; done; }
# Seconds (float) of a klog line's time of day: "I1201 13:55:01.123456 ..."
klog_secs() { awk '{split($2, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3]}'; }
# fabricctl check -o json inside a container; prints the JSON, returns fabricctl's exit code.
check_in() { pod_exec "$1" c /opt/fabric/fabricctl check -o json; }
# The container's device cgroup entries for the fake node's devices only (sorted "c maj:min rw").
node_dev_numbers() { cat "$TREE"/sys/class/infiniband_verbs/*/dev "$TREE"/sys/class/infiniband_mad/*/dev \
  "$TREE"/sys/class/misc/rdma_cm/dev 2>/dev/null | sort -u; }
cgroup_node_devs() {
  local allowed
  allowed=$(container_cgroup_devices "$1" c) || return 1
  grep -Ff <(node_dev_numbers | sed 's/^/c /; s/$/ /') <<<"$allowed" | sort
}
expect() {  # DESCRIPTION COMMAND...: logs, returns the command's status
  if "${@:2}"; then echo "ok: $1"; else echo "NOT OK: $1"; return 1; fi
}
export TREE AGENT FABRICCTL

# ---- bring up the node ----------------------------------------------------------------------------
CASELOG=$OUTDIR/cases
mkdir -p "$CASELOG"
setup_log=$OUTDIR/setup.log
cleanup() {
  stop_cluster >>"$setup_log" 2>&1
  if [[ ${RK_KEEP:-0} == 1 ]]; then
    echo "realkubelet: work dir kept: $WORK"
  else
    cp "$WORK"/*.log "$OUTDIR/" 2>/dev/null
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
{
  build_pause_image "$WORK/images/pause.tar" &&
  build_busybox_image "$WORK/images/busybox.tar" docker.io/local/busybox:rk \
    "$(realpath "$FABRICCTL"):/opt/fabric/fabricctl"
} >>"$setup_log" 2>&1 || fail_setup "image build failed (see $setup_log)"
start_cluster >>"$setup_log" 2>&1 || { tail -30 "$setup_log"; fail_setup "cluster did not start"; }
import_image "$WORK/images/pause.tar" && import_image "$WORK/images/busybox.tar" ||
  fail_setup "image import failed"
start_agent
# Cases start once the kubelet knows all four resources: a static Pod admitted before its resource's
# first registration runs WITHOUT devices (the kubelet skips resources its device manager does not know).
for ((i = 0; i < 300; i++)); do
  [[ $(grep -c 'Got registration request' "$(kubelet_log)") -ge 4 ]] && break
  sleep 0.1
done
[[ $(grep -c 'Got registration request' "$(kubelet_log)") -ge 4 ]] || fail_setup "the agent did not register (see $(agent_log))"
# The node when whole: healthy units per resource in the kubelet's view. Every case starts from it.
node_units() { checkpoint | jq -c '.Data.RegisteredDevices | map_values(length)'; }
for ((i = 0; i < 50; i++)); do
  WHOLE=$(node_units)
  [[ $(jq '[.[]] | add' <<<"$WHOLE" 2>/dev/null) -gt 0 && $(jq 'length' <<<"$WHOLE") -ge 3 ]] && break
  sleep 0.1
done
echo "node: $WHOLE" >>"$setup_log"
wait_node_whole() {  # the agent gives back withdrawn units within its 2 s PodResources period
  local i
  for ((i = 0; i < 100; i++)); do [[ $(node_units) == "$WHOLE" ]] && return 0; sleep 0.1; done
  echo "realkubelet: note: the node is not whole before $1: $(node_units) (whole: $WHOLE)"
}
t_up=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')

# ---- cases ------------------------------------------------------------------------------------------
passed=0 failed=0
for c in "$HERE"/cases/[0-9][0-9]-*.sh; do
  name=$(basename "$c" .sh)
  num=$((10#${name%%-*}))
  if [[ -n ${RK_CASES:-} ]]; then
    sel=0
    for p in $RK_CASES; do [[ $num == "$p" ]] && sel=1; done
    ((sel)) || continue
  fi
  if [[ -n $NO_API ]] && grep -qx '# rk: needs the API server' "$c"; then
    echo "realkubelet: SKIP $name: $NO_API"
    continue
  fi
  wait_node_whole "$name"
  ct0=$(date +%s.%N)
  (set -uo pipefail; source "$c") >"$CASELOG/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$ct0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  summary=$(grep -E '^RESULT: ' "$CASELOG/$name.log" | tail -1 | cut -d' ' -f2-)
  grep -E '^FIGURE: ' "$CASELOG/$name.log" | sed "s/^FIGURE: /realkubelet:   $name: /"
  if [[ $rc == 0 ]]; then
    passed=$((passed + 1))
    echo "realkubelet: PASS $name (${secs}s)${summary:+: $summary}"
  else
    failed=$((failed + 1))
    why=$(grep -E '^NOT OK: ' "$CASELOG/$name.log" | head -3 | cut -d' ' -f3- | paste -sd';')
    echo "realkubelet: FAIL $name (${secs}s): ${why:-exit $rc}"
    echo "---- $name: case log (tail) ----"
    tail -n 40 "$CASELOG/$name.log"
    echo "---- $name: agent log (tail) ----"
    tail -n 15 "$(agent_log)"
  fi
  [[ ${RK_VERBOSE:-0} == 1 ]] && sed "s/^/  $name| /" "$CASELOG/$name.log"
  # A case must not leave Pods behind for the next one.
  api_delete_all_pods >/dev/null 2>&1
  for m in "$RK_MANIFESTS"/*.yaml; do
    [[ -e $m ]] && delete_static_pod "$(basename "$m" .yaml)" >/dev/null 2>&1
  done
done
wall=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
plane="standalone"
[[ -n ${RK_REGISTERED:-} ]] && plane="registered with kube-apiserver $("$RK_APISERVER_BIN" --version 2>/dev/null | cut -d' ' -f2) + etcd $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p') (up in ${RK_CP_SECS}s)"
echo "realkubelet: kubelet $("$RK_KUBELET" --version 2>/dev/null | cut -d' ' -f2) $plane, $(containerd --version | cut -d' ' -f3), runc $(runc --version | head -1 | cut -d' ' -f3); node up in ${t_up}s, wall ${wall}s; logs in $OUTDIR"
echo "$passed passed, $failed failed"
((failed == 0))
