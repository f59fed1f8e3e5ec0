#!/bin/bash
# 11-engine-env (issue 24): the engine finds the fabric it was granted. The real kubelet v1.20.2,
# containerd and runc in the soft-RoCE VM (lib/rk-vm.sh, as 09), the agent with the pool
# device.gpustack.ai/rdma configured `env: [mooncake, nccl, nccl-gid-index, ucx]`:
# (a) a Pod asking device.gpustack.ai/rdma: 1 gets MOONCAKE_DEVICE, MC_MS_FILTERS, MC_GID_INDEX,
#     NCCL_IB_HCA, NCCL_IB_GID_INDEX and UCX_NET_DEVICES for rxe0; MC_GID_INDEX is the RoCE v2 IPv4
#     GID's index in the VM's sysfs, and ibv_rc_pingpong -g "$MC_GID_INDEX" runs over it in the Pod;
# (b) `fabricctl check -o json` in that Pod passes stages 1-6, the RC loopback included;
# (c) the same with RLIMIT_MEMLOCK lowered to 64 KiB and no CDI hook (the agent runs with
#     --memlock-hook-path ""): stage 4 fails with ENOMEM, exit 7 (memlock-too-low), the limit printed;
# (d) a Pod that sees /dev/infiniband only through a hostPath fails stage 1 with EPERM (exit 3);
# (e) who wins when the Pod spec sets a variable the grant sets too: the Pod sets UCX_NET_DEVICES
#     (the container's OCI spec env is recorded too);
# (f) the kernel facts the GID reader relies on: the table's length, what an empty slot reads, a new
#     address in the lowest free slot (holes included), and /v1/node following added and removed
#     addresses without any listing change.
# The Pods' processes get an unlimited RLIMIT_MEMLOCK from containerd (raised with prlimit before
# the first Pod: a node's runtime unit sets LimitMEMLOCK=infinity for RDMA), so stage 4's 64 MiB
# registration passes in (b). Outputs: env.txt, check.json, check-memlock.json,
# check-hostpath.json, v1-node.json, gid-facts.txt, spec-env.json in the case's output dir.
# e2e: needs the real kubelet
# e2e: timeout 600
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
# shellcheck source=../lib/rk-vm.sh
source "$E2E_LIB/rk-vm.sh"
rkvm_check_parts
for t in ibv_rc_pingpong prlimit; do command -v "$t" >/dev/null || skip "$t not installed"; done
ctl_help=$("$FABRICCTL" --help 2>&1)
[[ $ctl_help == *"--mr-size"* ]] || skip "fabricctl check has no verbs stages yet"
want_gid=$(roce_v2_ipv4_gid_index "$IBDEV") || fail "no RoCE v2 IPv4 GID on $IBDEV in the VM's sysfs"
log "sysfs: $IBDEV's RoCE v2 IPv4 GID is index $want_gid ($(cat "/sys/class/infiniband/$IBDEV/ports/1/gids/$want_gid"))"

rkvm_node /run/rk11
cat >"$RK_WORK/agent-config.yaml" <<YAML
pools:
  - name: $RES
    selector: {kinds: [rdma]}
    env: [mooncake, nccl, nccl-gid-index, ucx]
YAML
RKVM_METRICS=127.0.0.1:9436
rkvm_start --config "$RK_WORK/agent-config.yaml"
# New shims inherit containerd's limits, and runc passes on what the spec does not set.
prlimit --pid "$(cat "$RK_WORK/pids/containerd" 2>/dev/null || pgrep -x containerd | head -1)" \
  --memlock=unlimited:unlimited || fail "cannot raise containerd's RLIMIT_MEMLOCK"

# Kernel facts the agent's GID reader relies on (agent/sysfs/gid_table): the table's length, what an empty slot
# reads, and that a new address takes the lowest free slot (holes included); and the running agent
# sees the added addresses in /v1/node without a listing change.
P=/sys/class/infiniband/$IBDEV/ports/1
agent_ipv4_gids() {  # N: /v1/node counts N candidates on the pool's port
  curl -s -m 5 "http://$RKVM_METRICS/v1/node" |
    jq -e --argjson n "$1" '.pools[0].engine_env.ports[0].candidates == $n' >/dev/null 2>&1
}
slot_of() { grep -l "$1" "$P"/gids/* 2>/dev/null | head -1 | xargs -r basename; }
{
  echo "slots: $(ls "$P/gids" | wc -l)"
  empty=$(grep -l '^0000:0000:0000:0000:0000:0000:0000:0000$' "$P"/gids/* | head -1 | xargs basename)
  echo "empty slot $empty: gids '$(cat "$P/gids/$empty")', types: $(cat "$P/gid_attrs/types/$empty" 2>&1), ndevs: $(cat "$P/gid_attrs/ndevs/$empty" 2>&1)"
  ip addr add 10.0.2.98/24 dev "$NETDEV" && ip addr add 10.0.2.99/24 dev "$NETDEV" && sleep 1
  echo "10.0.2.98 in slot $(slot_of 0a00:0262), 10.0.2.99 in slot $(slot_of 0a00:0263)"
  wait_for 10 agent_ipv4_gids 3 && echo "the agent's /v1/node lists 3 RoCE v2 IPv4 GIDs on $IBDEV"
  ip addr del 10.0.2.98/24 dev "$NETDEV" && sleep 1 && ip addr add 10.0.2.97/24 dev "$NETDEV" && sleep 1
  echo "after removing .98, 10.0.2.97 in slot $(slot_of 0a00:0261)"
  ip addr del 10.0.2.97/24 dev "$NETDEV"; ip addr del 10.0.2.99/24 dev "$NETDEV"
  wait_for 10 agent_ipv4_gids 1 && echo "the agent's /v1/node lists 1 RoCE v2 IPv4 GID on $IBDEV again"
} >"$OUT/gid-facts.txt" 2>&1
log "GID table facts: $(tr '\n' ';' <"$OUT/gid-facts.txt")"
s98=$(sed -n 's/^10.0.2.98 in slot \([0-9]*\),.*/\1/p' "$OUT/gid-facts.txt")
s97=$(sed -n 's/^after removing .98, 10.0.2.97 in slot \([0-9]*\)/\1/p' "$OUT/gid-facts.txt")
[[ -n $s98 && $s98 == "$s97" ]] || fail "a new address did not take the lowest free GID slot (.98 in '$s98', then .97 in '$s97')"
grep -q "lists 3 RoCE v2 IPv4 GIDs" "$OUT/gid-facts.txt" && grep -q "lists 1 RoCE v2 IPv4 GID on" "$OUT/gid-facts.txt" ||
  fail "the agent's /v1/node did not follow the GID table: $(tr '\n' ';' <"$OUT/gid-facts.txt")"

rkvm_pod e2e-env "      env: [{name: UCX_NET_DEVICES, value: set-by-the-pod-spec}]
      resources: {limits: {$RES: 1}}" 0 | run_static_pod e2e-env
rkvm_pod e2e-hostpath "" 1 | run_static_pod e2e-hostpath
wait_container_running e2e-env c 90 2>>"$OUT/setup.log" ||
  fail "granted Pod not running: $(pod_json e2e-env | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
wait_container_running e2e-hostpath c 60 2>>"$OUT/setup.log" ||
  fail "hostPath Pod not running: $(pod_json e2e-hostpath | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
log "both Pods running at $(since)s"
curl -s -m 30 "http://$RKVM_METRICS/v1/node" >"$OUT/v1-node.json" || log "no /v1/node"

# One exec per Pod (each costs seconds under TCG); sections "== NAME", each ending "EXIT=<code>".
g=$(pod_exec e2e-env c /bin/sh -c "
  echo '== env'; env | grep -E '^(MOONCAKE_|MC_|NCCL_|UCX_|FI_|FABRIC_)' | sort; echo EXIT=0
  echo '== check'; $FABRICCTL check -o json 2>/dev/null; echo EXIT=\$?
  echo '== check-text'; $FABRICCTL check 2>&1; echo EXIT=\$?
  echo '== memlock'; (ulimit -l 64 && $FABRICCTL check -o json 2>/dev/null); echo EXIT=\$?
  echo '== pingpong'; ibv_rc_pingpong -d $IBDEV -g \"\$MC_GID_INDEX\" -n 5 >/tmp/pp-server.log 2>&1 &
  sleep 2; timeout 60 ibv_rc_pingpong -d $IBDEV -g \"\$MC_GID_INDEX\" -n 5 127.0.0.1 2>&1; rc=\$?
  wait; cat /tmp/pp-server.log; echo EXIT=\$rc" 2>&1)
echo "==== granted Pod"; echo "$g"
section() { awk -v s="== $2" '$0 == s { f = 1; next } /^== / { f = 0 } f' <<<"$1"; }
body() { section "$1" "$2" | grep -v '^EXIT='; }
exit_of() { section "$1" "$2" | sed -n 's/^EXIT=//p' | tail -1; }
body "$g" env >"$OUT/env.txt"
body "$g" check >"$OUT/check.json"
body "$g" memlock >"$OUT/check-memlock.json"
envval() { sed -n "s/^$1=//p" "$OUT/env.txt"; }

# (a) the variables
[[ $(envval MOONCAKE_DEVICE) == "$IBDEV" ]] || fail "MOONCAKE_DEVICE is '$(envval MOONCAKE_DEVICE)', want $IBDEV"
[[ $(envval MC_MS_FILTERS) == "$IBDEV" ]] || fail "MC_MS_FILTERS is '$(envval MC_MS_FILTERS)', want $IBDEV"
[[ $(envval NCCL_IB_HCA) == "=$IBDEV:1" ]] || fail "NCCL_IB_HCA is '$(envval NCCL_IB_HCA)', want =$IBDEV:1"
[[ $(envval MC_GID_INDEX) == "$want_gid" ]] ||
  fail "MC_GID_INDEX is '$(envval MC_GID_INDEX)', the RoCE v2 IPv4 GID of $IBDEV is index $want_gid"
[[ $(envval NCCL_IB_GID_INDEX) == "$want_gid" ]] || fail "NCCL_IB_GID_INDEX is '$(envval NCCL_IB_GID_INDEX)', want $want_gid"
[[ $(exit_of "$g" pingpong) == 0 ]] ||
  fail "ibv_rc_pingpong -g \$MC_GID_INDEX in the Pod failed: $(body "$g" pingpong | tail -n 3 | tr '\n' ' ')"
# (e) a variable both the Pod spec and the grant set: what containerd got and kept
ucx=$(envval UCX_NET_DEVICES)
ctr_k8s containers info "$(container_id e2e-env c)" 2>/dev/null |
  jq -c '[.Spec.process.env[] | select(startswith("UCX_") or startswith("MC_GID"))]' >"$OUT/spec-env.json"
log "the container's OCI spec env (UCX_, MC_GID): $(cat "$OUT/spec-env.json")"
grep -i "conflict\|UCX_NET_DEVICES" "$RK_WORK_LOGS"/kubelet*.log 2>/dev/null | head -3 >"$OUT/kubelet-env-lines.txt"
log "UCX_NET_DEVICES: the Pod spec says set-by-the-pod-spec, the grant $IBDEV:1; the container has '$ucx'"
[[ $ucx == set-by-the-pod-spec || $ucx == "$IBDEV:1" ]] || fail "UCX_NET_DEVICES is '$ucx', neither value"

# (b) every stage passes
jq -e . "$OUT/check.json" >/dev/null 2>&1 || fail "fabricctl check -o json in the granted Pod: no JSON: $(head -c 300 "$OUT/check.json")"
c_rc=$(exit_of "$g" check) c_v=$(jq -r .verdict "$OUT/check.json")
[[ $c_rc == 0 && $c_v == ok ]] || fail "fabricctl check in the granted Pod: verdict $c_v, exit $c_rc: $(jq -r .summary "$OUT/check.json")"
stages=$(jq -r --arg d "$IBDEV" '.fabric[] | select(.device == $d) | [.stages[] | "\(.name)=\(.status)"] | join(" ")' "$OUT/check.json")
[[ $stages == "open=ok port=ok gid=ok mr=ok qp=ok loopback=ok" ]] || fail "stages on $IBDEV: $stages"
jq -e --argjson g "$want_gid" '.fabric[0].stages[2].roce_v2_ipv4_index == $g and .fabric[0].stages[5].gid_index == $g' \
  "$OUT/check.json" >/dev/null || fail "check's GID stage does not find index $want_gid"
jq -e '.fabric[0].stages[3].bytes == 67108864' "$OUT/check.json" >/dev/null || fail "stage 4 did not register 64 MiB"

# (c) memlock lowered, no CDI hook
m_rc=$(exit_of "$g" memlock)
jq -e . "$OUT/check-memlock.json" >/dev/null 2>&1 || fail "memlock check: no JSON: $(head -c 300 "$OUT/check-memlock.json")"
m_mr=$(jq -c '.fabric[0].stages[3] | {status, errno, error, memlock_soft, message}' "$OUT/check-memlock.json")
log "memlock 64 KiB: exit $m_rc, stage 4: $m_mr"
[[ $m_rc == 7 && $(jq -r .verdict "$OUT/check-memlock.json") == memlock-too-low ]] ||
  fail "with RLIMIT_MEMLOCK 64 KiB: exit $m_rc, verdict $(jq -r .verdict "$OUT/check-memlock.json"), want 7 memlock-too-low"
jq -e '.fabric[0].stages[3] | .status == "failed" and .errno == 12 and .memlock_soft == "64 KiB"
       and (.message | test("RLIMIT_MEMLOCK soft 64 KiB"))' "$OUT/check-memlock.json" >/dev/null ||
  fail "stage 4 under 64 KiB: $m_mr"

# (d) hostPath only: stage 1 EPERM
h=$(pod_exec e2e-hostpath c /bin/sh -c "$FABRICCTL check -o json 2>/dev/null; echo EXIT=\$?" 2>&1)
grep -v '^EXIT=' <<<"$h" >"$OUT/check-hostpath.json"
h_rc=$(sed -n 's/^EXIT=//p' <<<"$h" | tail -1)
h_s1=$(jq -c '.fabric[0].stages[0] | {status, errno, error}' "$OUT/check-hostpath.json" 2>/dev/null)
log "hostPath Pod: exit $h_rc, stage 1: $h_s1"
[[ $h_rc == 3 ]] || fail "fabricctl check in the hostPath Pod exits '$h_rc', want 3 (not-granted): $(head -c 300 "$OUT/check-hostpath.json")"
jq -e '.fabric[0].stages[0] | .status == "failed" and .errno == 1' "$OUT/check-hostpath.json" >/dev/null ||
  fail "hostPath Pod stage 1: $h_s1, want failed with EPERM"

# The agent says per port what a grant gets.
jq -e --argjson g "$want_gid" '.pools[] | select(.resource == "device.gpustack.ai/rdma") | .engine_env.gid_index_all_devices == $g' \
  "$OUT/v1-node.json" >/dev/null || log "note: /v1/node engine_env: $(jq -c '.pools[0].engine_env' "$OUT/v1-node.json" 2>/dev/null)"

pass "MC_GID_INDEX=$want_gid (pingpong -g ok), stages 1-6 ok on $IBDEV (loopback $(jq -r '.fabric[0].stages[5].message' "$OUT/check.json")); memlock 64 KiB: exit 7; hostPath: stage 1 EPERM, exit 3; UCX_NET_DEVICES with both set: '$ucx'; $(since)s"
