# Case 10 (issue 19 item 3): the exclusive/shared rule holds through a kubelet restart. The kubelet
# serves PodResources before its pod manager is filled, so its first List after a restart is [] while
# a shared Pod still runs. The agent keeps every hold until the view has settled and reads the
# kubelet's checkpoint, so an exclusive Pod admitted in the first seconds after the restart can never
# get the shared Pod's device.
RDMA=device.gpustack.ai/rdma SHARED=device.gpustack.ai/rdma.shared
ok=0
n_rdma=$(rdma_devices | wc -l)
registered() { checkpoint | jq -r --arg r "$1" '.Data.RegisteredDevices[$r] // [] | length'; }
mkpod c10-shared "$SHARED=1" | run_static_pod c10-shared
wait_container_running c10-shared c 60 || { echo "NOT OK: shared Pod not running"; exit 1; }
dev=$(wait_pod_device_ids c10-shared $SHARED | sed 's/\.t[0-9]*$//')
[[ -n $dev ]] || { echo "NOT OK: the running shared Pod holds no $SHARED token in the kubelet's checkpoint"; exit 1; }
for ((i = 0; i < 50; i++)); do [[ $(registered $RDMA) == $((n_rdma - 1)) ]] && break; sleep 0.1; done
echo "c10-shared holds a token of $dev; the kubelet sees $(registered $RDMA)/$n_rdma exclusive rdma units healthy"
expect "before the restart, $dev is withdrawn from the exclusive pool" \
  test "$(registered $RDMA)" == $((n_rdma - 1)) || ok=1

restart_kubelet || { echo "NOT OK: kubelet restart"; exit 1; }
t_restart=$(date +%s.%N)
for ((i = 0; i < 100; i++)); do [[ $(grep -c 'Got registration request' "$(kubelet_log)") -ge 4 ]] && break; sleep 0.1; done
echo "the agent re-registered $(awk -v a="$t_restart" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s after the restart"
# The exclusive Pod asks for every rdma device, so it can only be admitted by taking $dev too.
mkpod c10-excl "$RDMA=$n_rdma" | run_static_pod c10-excl
# Sample the kubelet's view for the first seconds after the restart: $dev must never be offered.
worst=0
for ((i = 0; i < 40; i++)); do
  h=$(registered $RDMA); [[ $h -gt $worst ]] && worst=$h
  sleep 0.25
done
p=$(pod_phase c10-excl)
excl=$(pod_device_ids c10-excl $RDMA)
echo "after the restart: c10-excl phase ${p:-none} holds: $(echo $excl); most exclusive units offered healthy: $worst/$n_rdma"
expect "the kubelet was never offered $dev through the exclusive pool in the 10 s after the restart" \
  test "$worst" -le $((n_rdma - 1)) || ok=1
expect "c10-excl did not get $dev" eval '! grep -qx "$dev" <<<"$excl"' || ok=1
expect "the shared Pod still holds its token" test -n "$(pod_device_ids c10-shared $SHARED)" || ok=1
expect "the agent saw the restart and kept its holds" \
  grep -q "the kubelet restarted (its PodResources socket was replaced): every hold is kept" "$(agent_log)" || ok=1
expect "the agent logged no released hold or grant of $dev" \
  eval '! grep -E "released: the kubelet does not hold it" "$(agent_log)" | grep -q "$dev"' || ok=1
delete_static_pod c10-excl >/dev/null
delete_static_pod c10-shared >/dev/null
echo "RESULT: through a kubelet restart $dev stayed withdrawn from $RDMA (at most $worst/$n_rdma offered); c10-excl: ${p:-none}"
exit $ok
