# Case 13 (issue 25): what the agent's Pod conditions rely on, checked against the real kubelet and
# API server before the agent writes any. A ServiceAccount with only get/list/watch on pods and patch on
# pods/status (the agent's rights) adds `fabric.gpustack.ai/FabricAttached` to a Pod's
# status.conditions with a strategic merge patch of pods/status (the kubelet's own shape):
# - a Pod with readinessGates on that condition is not Ready before the patch (its container is
#   ready), and Ready after it;
# - the condition survives the kubelet's own status writes: a watch records every write to the Pod
#   for more than two of the kubelet's status sync periods (10 s each), while the container's
#   readiness probe is flipped off and on again so the kubelet must write; every write keeps the
#   condition with its lastTransitionTime, and the Pod ends Ready;
# - patching it to False makes the Pod not Ready again.
# rk: needs the API server
EFA=vpc.amazonaws.com/efa COND=fabric.gpustack.ai/FabricAttached
NS=rk-work SA_NS=fabric-system SA=rk-agent
ok=0
api_namespace "$NS" && api_namespace "$SA_NS" && api_sa "$SA_NS" "$SA" &&
  api_clusterrole rk-agent '[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]},
                             {"apiGroups":[""],"resources":["pods/status"],"verbs":["patch"]}]' &&
  api_bind "" rk-agent ClusterRole rk-agent "$SA_NS" "$SA" || { echo "NOT OK: RBAC set-up"; exit 1; }
TOKEN=$(sa_token "$SA_NS" "$SA") || { echo "NOT OK: no token from the TokenRequest API"; exit 1; }
echo "the agent's token authenticates as: $(api_whoami "$TOKEN")"

api_create_pod "$NS" <<EOF || { echo "NOT OK: the API server refused the gated Pod"; exit 1; }
apiVersion: v1
kind: Pod
metadata: {name: c13-gated, namespace: $NS}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  readinessGates: [{conditionType: "$COND"}]
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "touch /tmp/ready; sleep 100000"]
      readinessProbe: {exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1, failureThreshold: 1}
      resources: {limits: {$EFA: 1}}
EOF
expect "the gated Pod's container is ready" wait_api_condition "$NS" c13-gated ContainersReady True 60 || ok=1
sleep 3  # a few more kubelet syncs: the gate alone must keep it not Ready
ready=$(api_condition "$NS" c13-gated Ready)
echo "before the patch: Ready = $(jq -c '{status, reason, message}' <<<"$ready")"
expect "before the patch the Pod is not Ready (ReadinessGatesNotReady)" \
  test "$(jq -r '.status + " " + .reason' <<<"$ready")" == "False ReadinessGatesNotReady" || ok=1

# ---- the patch, as the agent's ServiceAccount -----------------------------------------------------------
rv=$(api_pod "$NS" c13-gated | jq -r .metadata.resourceVersion)
WATCH=$RK_WORK/c13-watch.jsonl
in_ns curl -sN -m 60 --cacert "$RK_API_DIR/ca.crt" -H "Authorization: Bearer $RK_ADMIN_TOKEN" \
  "$RK_API/api/v1/namespaces/$NS/pods?watch=1&fieldSelector=metadata.name=c13-gated&resourceVersion=$rv" >"$WATCH" &
watch_pid=$!
sleep 0.5
t_patch=$(date +%s.%N)
code=$(patch_condition -t "$TOKEN" "$NS" c13-gated "$COND" True Attached "rk test: opened the fabric")
expect "the ServiceAccount's patch of pods/status is accepted ($code)" test "$code" == 200 || ok=1
wait_api_condition "$NS" c13-gated Ready True 30 || ok=1
t_ready=$(awk -v a="$t_patch" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
cond=$(api_condition "$NS" c13-gated "$COND")
ltt=$(jq -r .lastTransitionTime <<<"$cond")
echo "after the patch: $COND = $(jq -c . <<<"$cond"); Ready = $(api_condition "$NS" c13-gated Ready | jq -c '{status, reason}') after ${t_ready}s"
expect "the condition is stored as sent" test "$(jq -r '.status + " " + .reason' <<<"$cond")" == "True Attached" || ok=1
expect "the Pod turns Ready after the patch" test "$(api_condition "$NS" c13-gated Ready | jq -r .status)" == True || ok=1

# ---- the kubelet's own writes ----------------------------------------------------------------------------
# Readiness probe off, then on: the kubelet must write ContainersReady/Ready twice each way.
pod_exec c13-gated c /bin/sh -c 'rm -f /tmp/ready'
expect "with its probe failing the Pod is not Ready" wait_api_condition "$NS" c13-gated ContainersReady False 30 || ok=1
pod_exec c13-gated c /bin/sh -c 'touch /tmp/ready'
expect "with its probe passing again the Pod is Ready again" wait_api_condition "$NS" c13-gated Ready True 30 || ok=1
# Past two status sync periods of the kubelet (10 s each) after the patch.
while awk -v a="$t_patch" -v b="$(date +%s.%N)" 'BEGIN{exit !(b - a < 25)}'; do sleep 0.5; done
kill "$watch_pid" 2>/dev/null; wait "$watch_pid" 2>/dev/null
# From the patch on (the first write that carries the condition).
writes=$(jq -sc --arg c "$COND" 'map(select(.type == "MODIFIED") | .object |
  {rv: .metadata.resourceVersion, cond: ([.status.conditions[]? | select(.type == $c)][0] // null),
   ready: ([.status.conditions[]? | select(.type == "Ready") | .status][0]),
   managers: [.metadata.managedFields[]? | "\(.manager)@\(.time)"]}) |
  (map(.cond != null) | index(true)) as $i | if $i == null then [] else .[$i:] end | .[]' "$WATCH")
echo "every write to the Pod after the patch (watch):"
jq -c '{rv, ready, cond: (.cond | if . == null then null else {status, lastTransitionTime} end), managers}' <<<"$writes" | sed 's/^/  /'
n_writes=$(grep -c . <<<"$writes")
lost=$(jq -c --arg t "$ltt" 'select(.rv != null) | select(.cond == null or .cond.status != "True" or .cond.lastTransitionTime != $t)' <<<"$writes" | grep -c .)
# The first MODIFIED is the patch itself; the kubelet wrote the others (Ready, then the probe flips).
expect "the kubelet wrote the Pod's status at least 3 times after the patch ($((n_writes - 1)))" test $((n_writes - 1)) -ge 3 || ok=1
expect "every one of the $n_writes writes kept the condition True with its lastTransitionTime" test "$lost" == 0 || ok=1
# The kubelet's field manager is named after its user agent (kubelet-v1.20.2).
kubelet_last=$(jq -r '.managers[] | select(startswith("kubelet"))' <<<"$(tail -1 <<<"$writes")" | cut -d@ -f2)
echo "the kubelet's managedFields entry after the last write: ${kubelet_last:-none}"
expect "the last write was the kubelet's (managedFields time after the patch)" \
  test "$(date -d "${kubelet_last:-1970-01-01T00:00:00Z}" +%s)" -ge "${t_patch%.*}" || ok=1
cond=$(api_condition "$NS" c13-gated "$COND")
expect "after 25 s the condition is still True with the same lastTransitionTime" \
  test "$(jq -r '.status + " " + .lastTransitionTime' <<<"$cond")" == "True $ltt" || ok=1

# ---- and back: False makes it not Ready --------------------------------------------------------------------
t_false=$(date +%s.%N)
code=$(patch_condition -t "$TOKEN" "$NS" c13-gated "$COND" False NotAttached "rk test: no QP on a granted device")
wait_api_condition "$NS" c13-gated Ready False 30 || ok=1
t_unready=$(awk -v a="$t_false" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
ready=$(api_condition "$NS" c13-gated Ready)
echo "after patching False: Ready = $(jq -c '{status, reason, message}' <<<"$ready") after ${t_unready}s"
expect "patched False ($code), the Pod is not Ready (ReadinessGatesNotReady)" \
  test "$(jq -r .reason <<<"$ready")" == ReadinessGatesNotReady || ok=1
describe=$(describe_pod "$NS" c13-gated 2>&1)
echo "kubectl describe pod (kubectl v1.34 against kube-apiserver v1.20.2):"
sed 's/^/  | /' <<<"$describe"
expect "kubectl describe shows the readiness gate and its condition" \
  eval 'grep -E "^Readiness Gates:" <<<"$describe" >/dev/null && grep -E "$COND +False" <<<"$describe" >/dev/null' || ok=1
api_delete_pod "$NS" c13-gated || ok=1
echo "FIGURE: patched condition -> Ready True ${t_ready}s; patched False -> Ready False ${t_unready}s (kube-apiserver watch -> kubelet -> status write)"
echo "RESULT: gate: not Ready before, Ready ${t_ready}s after the patch; the condition survived $((n_writes - 1)) kubelet writes over 25 s; False -> not Ready in ${t_unready}s"
exit $ok
