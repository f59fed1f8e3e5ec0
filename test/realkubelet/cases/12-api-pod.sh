# Case 12 (issue 25): the kubelet is registered as a Node with the real kube-apiserver, and a Pod
# created through the API with spec.nodeName set (no scheduler) gets its device from the agent.
# - The Node reports the agent's resources in status.allocatable with the node's counts.
# - A static Pod shows up as a mirror Pod in the API, Running.
# - A Pod created through the API in its own namespace, asking for vpc.amazonaws.com/efa: 1, runs:
#   the kubelet's checkpoint grants one EFA device to the API's Pod UID, the container sees exactly
#   that device's uverbs node, and the API's status says Running and Ready.
# rk: needs the API server
EFA=vpc.amazonaws.com/efa RDMA=device.gpustack.ai/rdma SHARED=device.gpustack.ai/rdma.shared
NS=rk-api
ok=0
n_efa=$(efa_devices | wc -l) n_rdma=$(rdma_devices | wc -l)

# ---- the Node -----------------------------------------------------------------------------------------
for r in "$EFA" "$RDMA" "$SHARED"; do wait_capacity "$r" 1 30; done
node=$(api_node)
echo "Node $RK_NODE: allocatable $(jq -c '.status.allocatable | with_entries(select(.key | contains("/")))' <<<"$node");" \
  "Ready: $(jq -c '.status.conditions[] | select(.type == "Ready") | {status, reason}' <<<"$node");" \
  "kubelet $(jq -r .status.nodeInfo.kubeletVersion <<<"$node")"
expect "the kubelet registered Node $RK_NODE" test "$(jq -r .metadata.name <<<"$node")" == "$RK_NODE" || ok=1
expect "allocatable efa is the node's $n_efa EFA devices" test "$(node_allocatable $EFA)" == "$n_efa" || ok=1
expect "allocatable rdma.shared is 64 tokens per rdma device" test "$(node_allocatable $SHARED)" == $((n_rdma * 64)) || ok=1
# rdma can be one short: a device held through rdma.shared is withdrawn from the exclusive pool.
healthy() { checkpoint | jq -r --arg r "$1" '.Data.RegisteredDevices[$r] // [] | length'; }
for ((i = 0; i < 50; i++)); do [[ $(node_allocatable $RDMA) == "$(healthy $RDMA)" ]] && break; sleep 0.1; done
expect "allocatable rdma is what the kubelet's device manager holds healthy ($(healthy $RDMA) of $n_rdma)" \
  test "$(node_allocatable $RDMA)" == "$(healthy $RDMA)" || ok=1

# ---- a static Pod is mirrored -------------------------------------------------------------------------
mkpod c12-static "" true | run_static_pod c12-static
wait_container_running c12-static c 60 || ok=1
for ((i = 0; i < 100; i++)); do
  [[ $(api_pod default "c12-static-$RK_NODE" 2>/dev/null | jq -r .status.phase) == Running ]] && break
  sleep 0.2
done
mirror=$(api_pod default "c12-static-$RK_NODE" 2>/dev/null)
echo "mirror Pod: $(jq -c '{name: .metadata.name, mirror: .metadata.annotations["kubernetes.io/config.mirror"], phase: .status.phase}' <<<"$mirror")"
expect "the static Pod is a mirror Pod in the API" \
  test -n "$(jq -r '.metadata.annotations["kubernetes.io/config.mirror"] // empty' <<<"$mirror")" || ok=1
expect "the mirror Pod is Running" test "$(jq -r .status.phase <<<"$mirror")" == Running || ok=1
delete_static_pod c12-static >/dev/null

# ---- a Pod through the API ----------------------------------------------------------------------------
api_namespace "$NS" || { echo "NOT OK: namespace $NS"; exit 1; }
t0=$(date +%s.%N)
sed "s/namespace: default/namespace: $NS/" <(mkpod c12-api "$EFA=1") | api_create_pod ||
  { echo "NOT OK: the API server refused the Pod"; exit 1; }
expect "the API Pod runs" wait_api_phase "$NS" c12-api Running 60 || { ok=1; }
expect "and turns Ready" wait_api_condition "$NS" c12-api Ready True 30 || ok=1
t_run=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
pod=$(api_pod "$NS" c12-api)
uid=$(jq -r .metadata.uid <<<"$pod")
echo "API Pod: $(jq -c '{node: .spec.nodeName, uid: .metadata.uid, phase: .status.phase, ready: [.status.conditions[] | select(.type == "Ready") | .status][0]}' <<<"$pod")"
expect "the kubelet runs the API's Pod (same UID)" test "$(pod_uid c12-api)" == "$uid" || ok=1
ids=$(pod_device_ids c12-api $EFA)
echo "kubelet checkpoint: UID $uid holds $(echo $ids)"
expect "the kubelet granted one EFA device to the API Pod's UID" test "$(wc -w <<<"$ids")" == 1 || ok=1
seen=$(pod_exec c12-api c ls /dev/infiniband | paste -sd' ')
echo "container /dev/infiniband: $seen"
expect "the container sees exactly that device's $(uverbs_of "$ids")" test "$seen" == "$(uverbs_of "$ids")" || ok=1
api_delete_pod "$NS" c12-api || ok=1
echo "FIGURE: a Pod created through the API (efa: 1, nodeName set) Running and Ready after ${t_run}s"
echo "RESULT: Node allocatable efa=$(node_allocatable $EFA) rdma=$(node_allocatable $RDMA); mirror Pod Running; API Pod got $(echo $ids) ($(uverbs_of "$ids")), Ready in ${t_run}s"
exit $ok
