# Case 11 (issue 19 item 3): a plain init container that asks for rdma.shared. PodResources v1 List
# reports app and sidecar containers only, so the grant was released by the settle rule 2 s after
# Allocate while the init container still ran, and the exclusive pool got the device back. The
# kubelet's checkpoint lists init containers: the device stays withdrawn for the whole init run.
RDMA=device.gpustack.ai/rdma SHARED=device.gpustack.ai/rdma.shared
ok=0
n_rdma=$(rdma_devices | wc -l)
registered() { checkpoint | jq -r --arg r "$1" '.Data.RegisteredDevices[$r] // [] | length'; }
INIT_SECS=14
run_static_pod c11-init <<EOF2
apiVersion: v1
kind: Pod
metadata: {name: c11-init, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  initContainers:
    - name: check
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "sleep $INIT_SECS"]
      resources: {limits: {$SHARED: 1}}
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "sleep 100000"]
EOF2
for ((i = 0; i < 120; i++)); do [[ -n $(pod_device_ids c11-init $SHARED) ]] && break; sleep 0.25; done
ids=$(pod_device_ids c11-init $SHARED)
dev=$(sed 's/\.t[0-9]*$//' <<<"$ids")
[[ -n $dev ]] || { echo "NOT OK: the init container got no token"; exit 1; }
t0=$(date +%s)
best=$n_rdma
samples=0
# While the init container runs, the kubelet must never see the exclusive pool whole again.
while [[ $(pod_phase c11-init) != Running ]] && (($(date +%s) - t0 < INIT_SECS + 30)); do
  h=$(registered $RDMA); samples=$((samples + 1))
  [[ $h -lt $best ]] && best=$h
  [[ $h -ge $n_rdma ]] && { echo "  $(date +%T): the exclusive pool is whole again ($h/$n_rdma) while the init container runs"; ok=1; break; }
  sleep 0.5
done
echo "init container held $ids ($dev) for ${INIT_SECS}s; $samples samples of the kubelet's view, exclusive rdma healthy: $best..$(registered $RDMA)/$n_rdma"
expect "the exclusive pool stayed withdrawn while the init container ran" test $ok == 0 || ok=1
expect "samples were taken while it ran" test "$samples" -ge 10 || ok=1
expect "the agent did not release the init container's grant" \
  eval '! grep -q "grant of $ids released" "$(agent_log)"' || ok=1
expect "the agent's /v1/node shows the init container's hold" \
  eval 'agent_node | jq -e --arg d "$dev" ".allocations[] | select(.container == \"check\" and .device == \$d)" >/dev/null' || ok=1
delete_static_pod c11-init >/dev/null
echo "RESULT: an init container's rdma.shared token kept $dev out of $RDMA for its whole ${INIT_SECS}s run"
exit $ok
