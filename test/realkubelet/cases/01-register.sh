# Case 1: the agent registers all four resources with the real kubelet, and the kubelet's own view
# (its device-manager checkpoint, and what admission says is available) matches the fake node.
# Re-registration is measured by the kubelet's log clock after a kubelet restart ("Serving device
# plugin registration server" -> "Got registration request"), and after an agent restart (agent
# start -> the kubelet's "Got registration request").
EFA=vpc.amazonaws.com/efa RDMA=device.gpustack.ai/rdma SHARED=device.gpustack.ai/rdma.shared
PART=device.gpustack.ai/rdma.partitioned
ok=0

wait_registered() {  # LOG N TIMEOUT_S: N distinct "Got registration request" resources in LOG
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    [[ $(grep -c 'Got registration request from device plugin' "$1" 2>/dev/null) -ge $2 ]] && return 0
    sleep 0.1
  done
  return 1
}
registered_resources() { grep -o 'Got registration request from device plugin with resource name "[^"]*"' "$1" |
  sed 's/.*"\(.*\)"/\1/' | sort -u; }

expect "four registration requests reach the kubelet" wait_registered "$(kubelet_log)" 4 30 || ok=1
echo "registered: $(registered_resources "$(kubelet_log)" | paste -sd' ')"
for r in $EFA $RDMA $SHARED $PART; do
  expect "$r registered" grep -q "resource name \"$r\"" "$(kubelet_log)" || ok=1
done

# The kubelet's view: healthy devices per resource, from its own checkpoint.
ckpt_ids() { checkpoint | jq -r --arg r "$1" '.Data.RegisteredDevices[$r] // [] | .[]' | sort; }
want_efa=$(efa_devices | sort)
want_rdma=$(rdma_devices | sort)
for ((i = 0; i < 50; i++)); do [[ $(ckpt_ids $EFA | wc -l) -ge 1 && $(ckpt_ids $SHARED | wc -l) -ge 1 ]] && break; sleep 0.2; done
echo "kubelet checkpoint: efa=$(ckpt_ids $EFA | wc -l) rdma=$(ckpt_ids $RDMA | wc -l) shared=$(ckpt_ids $SHARED | wc -l) partitioned=$(ckpt_ids $PART | wc -l)"
expect "the kubelet's efa devices are the node's EFA devices ($(wc -w <<<"$want_efa"))" \
  test "$(ckpt_ids $EFA)" == "$want_efa" || ok=1
expect "the kubelet's rdma devices are the node's other RDMA devices ($(wc -w <<<"$want_rdma"))" \
  test "$(ckpt_ids $RDMA)" == "$want_rdma" || ok=1
shared_devs=$(ckpt_ids $SHARED | sed 's/\.t[0-9]*$//' | sort -u)
expect "rdma.shared tokens cover exactly the rdma devices, 64 each" \
  test "$shared_devs" == "$want_rdma" -a "$(ckpt_ids $SHARED | wc -l)" == "$(( $(wc -w <<<"$want_rdma") * 64 ))" || ok=1
expect "rdma.partitioned has no devices on a node without SR-IOV VFs" test -z "$(ckpt_ids $PART)" || ok=1

# Admission is the kubelet's capacity check: one more EFA than the node has is refused with the
# kubelet's own count.
n_efa=$(wc -w <<<"$want_efa")
mkpod c1-toomany "$EFA=$((n_efa + 1))" | run_static_pod c1-toomany
wait_pod c1-toomany Failed 30 || true
msg=$(pod_json c1-toomany | jq -r '.status.message // empty')
echo "admission of $((n_efa + 1)) EFA: $(pod_json c1-toomany | jq -r '.status.reason // empty'): $msg"
expect "the kubelet refuses $((n_efa + 1)) EFA with 'Available: $n_efa'" \
  grep -q "Requested: $((n_efa + 1)), Available: $n_efa" <<<"$msg" || ok=1
delete_static_pod c1-toomany >/dev/null

# ---- re-registration after a real kubelet restart, by the kubelet's clock --------------------------
rereg_kubelet() {
  restart_kubelet || return 1
  local log
  log=$(kubelet_log)
  wait_registered "$log" 4 30 || return 1
  local serve first last
  serve=$(grep -m1 'Serving device plugin registration server' "$log" | klog_secs)
  first=$(grep -m1 'Got registration request' "$log" | klog_secs)
  last=$(grep 'Got registration request' "$log" | sed -n 4p | klog_secs)
  awk -v s="$serve" -v f="$first" -v l="$last" 'BEGIN{printf "%.0f %.0f\n", (f - s) * 1000, (l - s) * 1000}'
}
# What a v1.20 kubelet start deletes in device-plugins (kubelet-sim --kubelet-version 1.20 models it):
# every non-directory entry but the checkpoint, regular files too; current kubelets delete sockets only.
echo x >"$RK_KUBELET_DIR/device-plugins/rk-note.txt"
mkdir -p "$RK_KUBELET_DIR/device-plugins/rk-subdir"
figs=()
for run in 1 2; do
  f=$(rereg_kubelet) || { echo "NOT OK: re-registration after kubelet restart $run"; ok=1; break; }
  echo "kubelet restart $run: first registration +${f% *} ms, all four +${f#* } ms"
  figs+=("${f#* }")
  if [[ $run == 1 ]]; then
    expect "the v1.20 kubelet start deleted a regular file in device-plugins" \
      test ! -e "$RK_KUBELET_DIR/device-plugins/rk-note.txt" || ok=1
    expect "and kept the directory and the checkpoint" \
      test -d "$RK_KUBELET_DIR/device-plugins/rk-subdir" -a -f "$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint" || ok=1
  fi
done
if ((${#figs[@]})); then
  worst=$(printf '%s\n' "${figs[@]}" | sort -n | tail -1)
  met=$([[ $worst -le 250 ]] && echo met || echo MISSED)
  echo "FIGURE: re-registration after kubelet restart (kubelet log clock, all four): ${figs[*]} ms (issue target <= 250 ms: $met)"
  # Not a timing test: the agent's fallbacks are a 1 s retry and a 5 s check, so anything under a
  # second proves the re-registration was driven by the kubelet.sock event, not by a poll.
  expect "re-registration follows the kubelet.sock event, not a poll (worst ${worst} ms < 1000)" \
    test "$worst" -lt 1000 || ok=1
fi

# ---- after an agent restart: agent start (host clock, same as the kubelet's) -> registrations -------
# Baseline from the same run: the agent's first start -> its fourth registration (first kubelet log).
first_start=$(date -d "@$(cat "$RK_WORK/agent-1.started")" +%H:%M:%S.%N |
  awk '{split($1, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3]}')
base_last=$(grep 'Got registration request' "$RK_WORK/kubelet-1.log" | sed -n 4p | klog_secs)
base_ms=$(awk -v s="$first_start" -v l="$base_last" 'BEGIN{printf "%.0f", (l - s) * 1000}')
log=$(kubelet_log)
before=$(grep -c 'Got registration request' "$log")
stop_agent
t_start=$(date +%H:%M:%S.%N | awk '{split($1, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3]}')
start_agent
if wait_registered "$log" $((before + 4)) 30; then
  last=$(grep 'Got registration request' "$log" | sed -n "$((before + 4))p" | klog_secs)
  first=$(grep 'Got registration request' "$log" | sed -n "$((before + 1))p" | klog_secs)
  ms=$(awk -v s="$t_start" -v f="$first" -v l="$last" 'BEGIN{printf "%.0f %.0f", (f - s) * 1000, (l - s) * 1000}')
  echo "FIGURE: re-registration after agent restart (exec -> kubelet's Got registration request): first +${ms% *} ms, all four +${ms#* } ms (first start of the agent, same run: all four +${base_ms} ms)"
else
  echo "NOT OK: the agent did not re-register after its restart"; ok=1
fi
echo "RESULT: 4 resources, kubelet sees efa=$(ckpt_ids $EFA | wc -l) rdma=$(ckpt_ids $RDMA | wc -l) shared=$(ckpt_ids $SHARED | wc -l)"
exit $ok
