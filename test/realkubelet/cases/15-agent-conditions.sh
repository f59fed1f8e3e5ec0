# Case 15 (issue 25): the agent's own Pod conditions, against the real kubelet and kube-apiserver.
# fabric-agent restarts with --observe --pod-conditions (the chart's ClusterRole, a ServiceAccount
# token from the TokenRequest API) and --pods-tls-address. A gated Pod that requests an EFA:
# - the agent writes fabric.gpustack.ai/FabricAttached and Transport into its status (this host has
#   no RDMA stack, so no QP can be seen: the verdict is unknown and FabricAttached stays Unknown, never
#   True), and the Pod stays not Ready (ReadinessGatesNotReady): the gate fails closed;
# - the conditions survive the kubelet's own status writes (its readiness probe flipped off and on);
# - the agent patched pods/status a bounded number of times (counted in the Pod's managedFields);
# - /v1/pods over TLS: a member ServiceAccount allowed to get Pods in the namespace reads the Pod's
#   document with a token for the agent's audience, fabric.gpustack.ai/pods-api (TokenReview with
#   that audience + SubjectAccessReview by the real API server), a list is 403, no token 401, the
#   member's token for the API server's own audience 401 (issue 32 item 4); fabricctl observe sends
#   the token and checks the certificate.
# The attached / not-attached / fallback verdicts need a real RDMA device: the soft-RoCE VM.
# rk: needs the API server
EFA=vpc.amazonaws.com/efa AT=fabric.gpustack.ai/FabricAttached TR=fabric.gpustack.ai/Transport
NS=rk-c15 SA_NS=fabric-system SA=fabric-device-plugin
ok=0
# The chart's ClusterRoles (templates/observe-rbac.yaml; check-manifests asserts these exact rules).
api_namespace "$NS" && api_namespace "$SA_NS" && api_sa "$SA_NS" "$SA" &&
  api_clusterrole fabric-device-plugin-pod-conditions '[
    {"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]},
    {"apiGroups":[""],"resources":["pods/status"],"verbs":["patch"]},
    {"apiGroups":["events.k8s.io"],"resources":["events"],"verbs":["create","patch","list"]}]' &&
  api_bind "" fabric-device-plugin-pod-conditions ClusterRole fabric-device-plugin-pod-conditions "$SA_NS" "$SA" &&
  api_clusterrole fabric-device-plugin-pods-auth '[
    {"apiGroups":["authentication.k8s.io"],"resources":["tokenreviews"],"verbs":["create"]},
    {"apiGroups":["authorization.k8s.io"],"resources":["subjectaccessreviews"],"verbs":["create"]}]' &&
  api_bind "" fabric-device-plugin-pods-auth ClusterRole fabric-device-plugin-pods-auth "$SA_NS" "$SA" &&
  api_sa "$NS" member && api_role "$NS" member-get-pods '[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]' &&
  api_bind "$NS" member-get-pods Role member-get-pods "$NS" member || { echo "NOT OK: RBAC set-up"; exit 1; }
sa_token "$SA_NS" "$SA" >"$RK_WORK/c15-agent.token" &&
  sa_token "$NS" member 3600 fabric.gpustack.ai/pods-api >"$RK_WORK/c15-member.token" &&
  sa_token "$NS" member >"$RK_WORK/c15-member-api.token" ||
  { echo "NOT OK: no token from the TokenRequest API"; exit 1; }
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fabric-agent \
  -addext subjectAltName=DNS:fabric-agent.fabric-system,IP:127.0.0.1 \
  -keyout "$RK_WORK/c15-tls.key" -out "$RK_WORK/c15-tls.crt" 2>/dev/null || { echo "NOT OK: openssl"; exit 1; }

stop_agent
RK_AGENT_EXTRA="--observe --pod-conditions --node-name $RK_NODE --pod-attach-grace 5s
  --kube-api-server $RK_API --kube-token-file $RK_WORK/c15-agent.token --kube-ca-file $RK_API_DIR/ca.crt
  --pods-tls-address 127.0.0.1:9437 --pods-tls-cert-file $RK_WORK/c15-tls.crt
  --pods-tls-key-file $RK_WORK/c15-tls.key" start_agent
api_create_pod "$NS" <<EOF || { echo "NOT OK: the API server refused the gated Pod"; exit 1; }
apiVersion: v1
kind: Pod
metadata: {name: c15-gated, namespace: $NS}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  readinessGates: [{conditionType: "$AT"}]
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "touch /tmp/ready; sleep 100000"]
      readinessProbe: {exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1, failureThreshold: 1}
      resources: {limits: {$EFA: 1}}
EOF
expect "the gated Pod's container is ready" wait_api_condition "$NS" c15-gated ContainersReady True 60 || ok=1
for ((i = 0; i < 120; i++)); do
  [[ $(api_condition "$NS" c15-gated "$TR" | jq -r '.status // empty') != "" ]] && break
  sleep 0.5
done
at=$(api_condition "$NS" c15-gated "$AT")
tr=$(api_condition "$NS" c15-gated "$TR")
echo "the agent wrote: $AT = $(jq -c '{status, reason, message}' <<<"$at")"
echo "                 $TR = $(jq -c '{status, reason, message}' <<<"$tr")"
expect "the agent wrote both conditions" test "$(jq -r .type <<<"$tr")" == "$TR" || ok=1
expect "FabricAttached is not True without a QP" test "$(jq -r .status <<<"$at")" != True || ok=1
ready=$(api_condition "$NS" c15-gated Ready)
expect "the gated Pod is not Ready (ReadinessGatesNotReady)" \
  test "$(jq -r '.status + " " + .reason' <<<"$ready")" == "False ReadinessGatesNotReady" || ok=1

# The kubelet's own writes: probe off, then on.
ltt=$(jq -r .lastTransitionTime <<<"$at")
pod_exec c15-gated c /bin/sh -c 'rm -f /tmp/ready'
expect "with its probe failing the container is not ready" wait_api_condition "$NS" c15-gated ContainersReady False 30 || ok=1
pod_exec c15-gated c /bin/sh -c 'touch /tmp/ready'
expect "with its probe passing again it is ready again" wait_api_condition "$NS" c15-gated ContainersReady True 30 || ok=1
sleep 12  # past a kubelet status sync (10 s)
at2=$(api_condition "$NS" c15-gated "$AT")
expect "after the kubelet's writes FabricAttached is still there with its lastTransitionTime" \
  test "$(jq -r .lastTransitionTime <<<"$at2")" == "$ltt" || ok=1
echo "managedFields: $(api_pod "$NS" c15-gated | jq -c '[.metadata.managedFields[]? | {manager, subresource, time}]')"
m=$(in_ns curl -sf -m 5 http://127.0.0.1:9435/metrics)
echo "agent: $(grep -E '^fabric_pod_(conditions|events)_' <<<"$m" | tr '\n' ' ')"
n=$(awk '/^fabric_pod_conditions_patches_total/{print $2}' <<<"$m")
expect "the agent patched the Pod at most a few times (${n:-?}), not once per sample" test "${n:-99}" -le 4 || ok=1

# /v1/pods over TLS, reviewed by the real API server.
MT=$(cat "$RK_WORK/c15-member.token")
tls_get() {  # TOKEN PATH: the code; the body in $RK_WORK/c15-body
  local h=()
  [[ -n $1 ]] && h=(-H "Authorization: Bearer $1")
  in_ns curl -s -m 10 --cacert "$RK_WORK/c15-tls.crt" "${h[@]}" -o "$RK_WORK/c15-body" -w '%{http_code}' \
    "https://127.0.0.1:9437$2"
}
code=$(tls_get "$MT" "/v1/pods/$NS/c15-gated")
echo "member GET /v1/pods/$NS/c15-gated: $code $(head -c 300 "$RK_WORK/c15-body")"
expect "the member's token reads its namespace's Pod (200)" test "$code" == 200 || ok=1
code=$(tls_get "$MT" /v1/pods)
expect "the member's token may not list every Pod (403: $(jq -r .error "$RK_WORK/c15-body"))" test "$code" == 403 || ok=1
code=$(tls_get "" "/v1/pods/$NS/c15-gated")
expect "no token is 401" test "$code" == 401 || ok=1
code=$(tls_get "$(cat "$RK_WORK/c15-member-api.token")" "/v1/pods/$NS/c15-gated")
expect "the member's token for the API server's audience is 401 ($(jq -r .error "$RK_WORK/c15-body"))" \
  test "$code" == 401 || ok=1
out=$(in_ns "$FABRICCTL" observe --agent https://127.0.0.1:9437 --ca-file "$RK_WORK/c15-tls.crt" \
  --server-name fabric-agent.fabric-system --token-file "$RK_WORK/c15-member.token" --pod "$NS/c15-gated" 2>&1)
rc=$?
echo "fabricctl observe over TLS (exit $rc): $out"
expect "fabricctl observe reads the verdict over TLS with the token (unknown here: 22)" test "$rc" == 22 || ok=1
describe=$(describe_pod "$NS" c15-gated 2>&1)
echo "kubectl describe pod (kubectl v1.34 against kube-apiserver v1.20.2, the agent's conditions):"
sed 's/^/  | /' <<<"$describe"

api_delete_pod "$NS" c15-gated || ok=1
stop_agent
start_agent  # back to the suite's default flags
echo "RESULT: the agent's conditions written (FabricAttached $(jq -r .reason <<<"$at")), kept through the kubelet's writes, the gate not Ready; ${n:-?} patch(es); TLS /v1/pods 200/403/401/401 (API-audience token)"
exit $ok
