# Case 3: the seed question under a real runtime. A Pod that sees /dev/infiniband through a hostPath
# without asking for a resource gets EPERM on open, and fabricctl check inside it says not-granted and
# exits non-zero (3). Inside a granted Pod it says ok, or open-failed (ENXIO) on a fake node, never
# not-granted.
ok=0
mkpod c3-hostpath "" true 1 | run_static_pod c3-hostpath
mkpod c3-granted "vpc.amazonaws.com/efa=1" | run_static_pod c3-granted
wait_container_running c3-hostpath c 60 || { echo "NOT OK: hostPath Pod not running"; exit 1; }
wait_container_running c3-granted c 60 || { echo "NOT OK: granted Pod not running"; exit 1; }

seen=$(pod_exec c3-hostpath c ls /dev/infiniband | paste -sd' ')
echo "hostPath Pod sees: $seen"
expect "the hostPath Pod sees the node's uverbs nodes" grep -q uverbs <<<"$seen" || ok=1
err=$(pod_exec c3-hostpath c cat /dev/infiniband/uverbs0 2>&1 >/dev/null)
echo "hostPath Pod, cat uverbs0: $err"
expect "open gives EPERM (Operation not permitted)" grep -q 'Operation not permitted' <<<"$err" || ok=1

json=$(check_in c3-hostpath); rc=$?
echo "hostPath Pod: fabricctl check exit $rc: $(jq -c '{verdict, summary}' <<<"$json")"
expect "fabricctl check says not-granted in the hostPath Pod" test "$(jq -r .verdict <<<"$json")" == not-granted || ok=1
expect "and exits non-zero (3)" test "$rc" == 3 || ok=1

json=$(check_in c3-granted); rc=$?
v=$(jq -r .verdict <<<"$json")
echo "granted Pod: fabricctl check exit $rc: $(jq -c '{verdict, summary}' <<<"$json")"
expect "fabricctl check in the granted Pod says ok or open-failed, not not-granted ($v)" \
  grep -qxE 'ok|open-failed' <<<"$v" || ok=1
echo "RESULT: hostPath Pod: $(jq -r .verdict <<<"$(check_in c3-hostpath)") (exit 3, EPERM); granted Pod: $v (exit $rc)"
exit $ok
