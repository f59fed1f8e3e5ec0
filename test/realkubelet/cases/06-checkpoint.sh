# Case 6: the kubelet's checkpoint is honoured. After a kubelet restart, running Pods keep their
# devices (same containers, same grant, still openable) and a new Pod gets other ones. After an agent
# restart the same holds.
EFA=vpc.amazonaws.com/efa
ok=0
mkpod c6-a "$EFA=2" | run_static_pod c6-a
wait_container_running c6-a c 60 || { echo "NOT OK: Pod not running"; exit 1; }
a_ids=$(pod_device_ids c6-a $EFA); a_cid=$(container_id c6-a c)
echo "c6-a holds $(echo $a_ids) in container ${a_cid:0:12}"

still_holds() {  # NAME IDS CID WHEN
  local v
  expect "$1 keeps its grant after $4" test "$(pod_device_ids "$1" $EFA)" == "$2" || ok=1
  expect "$1 keeps its container after $4" test "$(container_id "$1" c)" == "$3" || ok=1
  v=$(check_in "$1" | jq -r .verdict)
  expect "$1 still opens its devices after $4 (check: $v)" grep -qxE 'ok|open-failed' <<<"$v" || ok=1
}
disjoint() {  # A_IDS B_IDS
  test -z "$(comm -12 <(echo "$1") <(echo "$2") | grep .)"
}

restart_kubelet || { echo "NOT OK: kubelet restart"; exit 1; }
for ((i = 0; i < 100; i++)); do [[ $(grep -c 'Got registration request' "$(kubelet_log)") -ge 4 ]] && break; sleep 0.1; done
wait_pod c6-a Running 30
still_holds c6-a "$a_ids" "$a_cid" "a kubelet restart"
mkpod c6-b "$EFA=2" | run_static_pod c6-b
wait_container_running c6-b c 60 || ok=1
b_ids=$(pod_device_ids c6-b $EFA)
echo "after the kubelet restart, c6-b got $(echo $b_ids)"
expect "c6-b got 2 devices, none of c6-a's" eval 'test "$(wc -w <<<"$b_ids")" == 2 && disjoint "$a_ids" "$b_ids"' || ok=1

stop_agent
start_agent
for ((i = 0; i < 100; i++)); do
  [[ $(metrics 2>/dev/null | grep -c '^fabric_resource_registered{.*} 1') -ge 4 ]] && break; sleep 0.1
done
b_cid=$(container_id c6-b c)
still_holds c6-a "$a_ids" "$a_cid" "an agent restart"
still_holds c6-b "$b_ids" "$b_cid" "an agent restart"
mkpod c6-c "$EFA=2" | run_static_pod c6-c
wait_container_running c6-c c 60 || ok=1
c_ids=$(pod_device_ids c6-c $EFA)
echo "after the agent restart, c6-c got $(echo $c_ids)"
expect "c6-c got 2 devices, none of c6-a's or c6-b's" \
  eval 'test "$(wc -w <<<"$c_ids")" == 2 && disjoint "$(printf "%s\n" $a_ids $b_ids | sort)" "$c_ids"' || ok=1
echo "RESULT: a=$(echo $a_ids) b=$(echo $b_ids) c=$(echo $c_ids); grants and containers survived both restarts"
exit $ok
