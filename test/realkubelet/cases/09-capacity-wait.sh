# Case 9 (issue 27): a Pod created before the kubelet knows the agent's devices is refused for good
# ("requested number of devices unavailable ... Available: 0"); in a full run case 10 once created
# its Pod 0.1 s after the agent started. Every Pod the harness creates first waits for the kubelet's
# capacity (wait_capacity, kube-api.sh). This case reproduces the refusal on purpose and checks
# the wait:
# - after a kubelet restart with the agent down, the kubelet's checkpoint file still lists the old
#   devices, but the kubelet has none: wait_capacity does not trust the file (it times out), and, when
#   registered, the Node's allocatable drops to 0;
# - a static Pod created then, without the wait (RK_WAIT_CAPACITY=0), is refused with exactly the
#   message of the flake;
# - once the agent is back, wait_capacity returns, and the same Pod runs with its device.
EFA=vpc.amazonaws.com/efa
ok=0
stop_agent
restart_kubelet || { echo "NOT OK: kubelet restart"; start_agent; exit 1; }
stale=$(checkpoint | jq -r --arg r "$EFA" '.Data.RegisteredDevices[$r] // [] | length')
echo "kubelet restarted with the agent down: its checkpoint file still lists $stale $EFA devices"
expect "the checkpoint file still lists the devices of before the restart ($stale)" test "$stale" -gt 0 || ok=1
expect "wait_capacity does not trust it: no $EFA capacity within 3 s" eval '! wait_capacity "$EFA" 1 3 2>/dev/null' || ok=1
if [[ -n ${RK_REGISTERED:-} ]]; then
  for ((i = 0; i < 100; i++)); do [[ $(node_allocatable "$EFA") == 0 ]] && break; sleep 0.1; done
  expect "the Node's allocatable $EFA is 0 ($(node_allocatable "$EFA"))" test "$(node_allocatable "$EFA")" == 0 || ok=1
fi
mkpod c9-early "$EFA=1" | RK_WAIT_CAPACITY=0 run_static_pod c9-early
wait_pod c9-early Failed 30 2>/dev/null
msg=$(pod_json c9-early | jq -r '(.status.reason // "") + ": " + (.status.message // "")')
echo "a Pod created without the wait: $(pod_phase c9-early): $msg"
expect "it is refused: 'requested number of devices unavailable ... Requested: 1, Available: 0'" \
  grep -q "requested number of devices unavailable for $EFA. Requested: 1, Available: 0" <<<"$msg" || ok=1
delete_static_pod c9-early >/dev/null

t0=$(date +%s.%N)
start_agent
expect "with the agent back, wait_capacity returns" wait_capacity "$EFA" 1 30 || ok=1
t_cap=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
mkpod c9-late "$EFA=1" | run_static_pod c9-late
expect "the same Pod, created after the wait, runs" wait_container_running c9-late c 60 || ok=1
ids=$(pod_device_ids c9-late "$EFA")
expect "with one $EFA device ($ids)" test "$(wc -w <<<"$ids")" == 1 || ok=1
delete_static_pod c9-late >/dev/null
echo "FIGURE: agent start -> the kubelet reports capacity (checkpoint$([[ -n ${RK_REGISTERED:-} ]] && echo " and Node allocatable")): ${t_cap}s"
echo "RESULT: refused without the wait (Available: 0); wait_capacity ${t_cap}s after the agent's start; then the Pod ran with $ids"
exit $ok
