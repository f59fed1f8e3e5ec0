#!/bin/bash
# 12-apiserver (issue 25): the VM's real kubelet registered as a Node with the real control plane
# (etcd + kube-apiserver v1.20.2, Node,RBAC; run.sh starts it on the host, the VM dials 10.0.2.2;
# lib/rk-vm.sh with RKVM_APISERVER=1), and the real rxe device behind the agent.
# - A Pod created through the API with spec.nodeName set and device.gpustack.ai/rdma: 1 gets rxe0:
#   the kubelet's checkpoint grants rxe0 to the API Pod's UID, and inside it ibv_devinfo shows rxe0
#   PORT_ACTIVE.
# - The Pod lists readinessGates on fabric.gpustack.ai/FabricAttached: with its container ready it is
#   not Ready (ReadinessGatesNotReady); a strategic merge patch of pods/status by a ServiceAccount
#   with only get/list/watch pods and patch pods/status makes it Ready, and the condition is still
#   there at the end.
# e2e: needs the real kubelet
# e2e: needs the API server
# e2e: timeout 420
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
# shellcheck disable=SC2034  # read by lib/rk-vm.sh
RKVM_APISERVER=1
# shellcheck source=../lib/rk-vm.sh
source "$E2E_LIB/rk-vm.sh"
rkvm_check_parts
COND=fabric.gpustack.ai/FabricAttached SA_NS=fabric-system SA=e2e-agent

rkvm_node /run/rk12
rkvm_start
t_node=$(since)

api_namespace "$SA_NS" && api_sa "$SA_NS" "$SA" &&
  api_clusterrole e2e-agent '[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]},
                              {"apiGroups":[""],"resources":["pods/status"],"verbs":["patch"]}]' &&
  api_bind "" e2e-agent ClusterRole e2e-agent "$SA_NS" "$SA" || fail "RBAC set-up through the API"
TOKEN=$(sa_token "$SA_NS" "$SA") || fail "no token from the TokenRequest API"
log "the agent's ServiceAccount token authenticates as: $(api_whoami "$TOKEN")"

# One container command does the device checks (each ctr exec costs seconds under TCG).
t0=$(date +%s.%N)
rkvm_pod e2e-api-gated "      resources: {limits: {$RES: 1}}" 0 true \
    "ibv_devinfo -d $IBDEV; ls /dev/infiniband; echo PROBED; sleep 100000" |
  sed "s|^spec:\$|spec:\n  readinessGates: [{conditionType: \"$COND\"}]|" | api_create_pod default ||
  fail "the API server refused the Pod"
wait_api_condition default e2e-api-gated ContainersReady True 180 2>>"$OUT/setup.log" ||
  fail "the API Pod's container is not ready: $(api_pod default e2e-api-gated | jq -c '.status | {phase, reason, message}')"
t_run=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
log "API Pod running and its container ready ${t_run}s after the create"
uid=$(api_pod default e2e-api-gated | jq -r .metadata.uid)
ids=$(pod_device_ids e2e-api-gated "$RES")
log "kubelet checkpoint: UID $uid holds $ids"
[[ $ids == "$IBDEV" ]] || fail "the kubelet granted '$ids' to the API Pod, want $IBDEV"
probed() { pod_logs e2e-api-gated c | grep -q PROBED; }
wait_for 30 probed || fail "no output from the Pod's probe"
out=$(pod_logs e2e-api-gated c)
echo "==== the API Pod's output"; echo "$out"
grep -qE "hca_id:[[:space:]]+$IBDEV" <<<"$out" && grep -q PORT_ACTIVE <<<"$out" ||
  fail "ibv_devinfo in the API Pod does not show $IBDEV PORT_ACTIVE"

ready=$(api_condition default e2e-api-gated Ready)
log "before the patch: Ready $(jq -c '{status, reason}' <<<"$ready")"
[[ $(jq -r '.status + " " + .reason' <<<"$ready") == "False ReadinessGatesNotReady" ]] ||
  fail "before the patch the gated Pod is $(jq -c '{status, reason}' <<<"$ready"), want False ReadinessGatesNotReady"
t_patch=$(date +%s.%N)
code=$(patch_condition -t "$TOKEN" default e2e-api-gated "$COND" True Attached "e2e: $IBDEV")
[[ $code == 200 ]] || fail "the ServiceAccount's patch of pods/status got HTTP $code"
wait_api_condition default e2e-api-gated Ready True 60 2>>"$OUT/setup.log" ||
  fail "the gated Pod did not turn Ready after the patch: $(api_condition default e2e-api-gated Ready)"
t_ready=$(awk -v a="$t_patch" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
# Polled from the VM (curl under TCG); the API server's own clock, to the second, says the same.
srv=$(api_pod default e2e-api-gated | jq -r --arg c "$COND" '[.status.conditions[] | select(.type == $c or .type == "Ready")
  | .lastTransitionTime | fromdate] | .[1] - .[0] | fabs')
log "after the patch: Ready True in ${t_ready}s (lastTransitionTime of Ready minus the condition's: ${srv}s)"
sleep 2
cond=$(api_condition default e2e-api-gated "$COND")
[[ $(jq -r .status <<<"$cond") == True ]] || fail "the condition was lost: $cond"
log "condition at the end: $cond"
pass "Node e2e-node registered, kubelet up in ${t_node}s; API Pod got $IBDEV (PORT_ACTIVE) in ${t_run}s; gate: not Ready before, Ready ${t_ready}s after the patch; $(since)s"
