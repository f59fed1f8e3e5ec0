# Case 7: non-hostNetwork Pods get their network from bridge + host-local with fabric-cni chained
# after them in containerd's CNI config. containerd's real ADD and DEL reach the agent: a Pod without
# fabric passes through (prevResult printed unchanged), a Pod with fabric gets its attribution recorded
# in the agent's state; deleting the Pod runs DEL, which removes the record, and a repeated DEL
# succeeds. containerd 1.6 never sends CHECK (containerd/containerd#13332: it still does not); the
# CHECK here replays containerd's own ADD input with prevResult, as libcni would.
ok=0
calls() {  # COMMAND [CONTAINER_ID]: the call folders fabric-cni saw, oldest first
  local d
  for d in $(ls -1 "$CNI_CALLS" 2>/dev/null | sort); do
    [[ $(cat "$CNI_CALLS/$d/command" 2>/dev/null) == "$1" ]] || continue
    [[ -z ${2:-} ]] || grep -q "^CNI_CONTAINERID=$2" "$CNI_CALLS/$d/env" || continue
    echo "$CNI_CALLS/$d"
  done
}
sandbox_of() {  # POD: the sandbox id from the CNI call whose CNI_ARGS name the Pod
  local d
  for d in $(calls ADD); do
    grep -Eq "K8S_POD_NAME=$1-$RK_NODE(;|$)" "$d/env" && { grep '^CNI_CONTAINERID=' "$d/env" | cut -d= -f2; return; }
  done
}
records() { cat "$RK_WORK"/agent-state/cni/*.json 2>/dev/null; }

mkpod c7-plain "" false | run_static_pod c7-plain
mkpod c7-fabric "vpc.amazonaws.com/efa=1" false | run_static_pod c7-fabric
wait_container_running c7-plain c 60 || { echo "NOT OK: the Pod without fabric is not running"; exit 1; }
if ! wait_container_running c7-fabric c 40; then
  why=$(sed -n 's/.*failed to setup network for sandbox[^:]*: \(.*\)"$/\1/p' "$RK_WORK/containerd.log" |
        tail -1 | tr -d '\\' | cut -c1-300)
  echo "NOT OK: the Pod with fabric is not running: ${why:-see containerd.log}"
  exit 1
fi
for p in c7-plain c7-fabric; do
  ip=$(pod_json $p | jq -r '.status.podIP // empty')
  addr=$(pod_exec $p c ip -4 -o addr show eth0 2>/dev/null || pod_exec $p c cat /proc/net/fib_trie | grep -m1 10.99)
  echo "$p: podIP ${ip:-none}; eth0: $(echo $addr | head -c 120)"
  expect "$p got an address from host-local (10.99.0.0/24)" grep -q '^10\.99\.0\.' <<<"$ip" || ok=1
done

sb_plain=$(sandbox_of c7-plain) sb_fabric=$(sandbox_of c7-fabric)
expect "containerd ran fabric-cni ADD for both Pods" test -n "$sb_plain" -a -n "$sb_fabric" || ok=1
for sb in $sb_plain $sb_fabric; do
  d=$(calls ADD "$sb" | tail -1)
  expect "ADD ${sb:0:12} exit 0" test "$(cat "$d/rc")" == 0 || ok=1
  # passthrough: the result printed is the bridge plugin's prevResult, unchanged
  expect "ADD ${sb:0:12} prints prevResult unchanged" \
    test "$(jq -S -c .prevResult "$d/stdin")" == "$(jq -S -c . "$d/stdout")" || ok=1
done
echo "agent CNI records: $(records | jq -c '{pod: .podName, devices: [.devices[]? | {resource, deviceID, rdmaDevice, action}]}' 2>/dev/null | paste -sd' ')"
expect "no record for the Pod without fabric" test -z "$(records | grep -F "\"c7-plain-$RK_NODE\"")" || ok=1
want=$(pod_device_ids c7-fabric vpc.amazonaws.com/efa)
expect "the agent recorded c7-fabric's device $want" \
  eval 'records | grep -F "\"c7-fabric-$RK_NODE\"" >/dev/null && records | grep -qF "\"$want\""' || ok=1
grep -F "c7-fabric" "$RK_WORK/fabric-cni.log" 2>/dev/null | tail -2 | sed 's/^/  fabric-cni.log: /'

# CHECK, as libcni would send it: containerd's ADD input with the ADD result as prevResult.
d=$(calls ADD "$sb_fabric" | tail -1)
jq --slurpfile r "$d/stdout" '.prevResult = $r[0]' "$d/stdin" >"$RK_WORK/check.json"
(set -a; source <(sed 's/^\([A-Z_]*\)=\(.*\)$/\1='"'"'\2'"'"'/' "$d/env"); CNI_COMMAND=CHECK
 in_ns "$RK_WORK/fabric-cni.real" <"$RK_WORK/check.json" >"$RK_WORK/check.out" 2>&1); rc=$?
expect "CHECK (replayed ADD input) exit 0$( ((rc)) && echo ": $(head -c 200 "$RK_WORK/check.out")")" test $rc == 0 || ok=1
expect "containerd itself sent no CHECK" test -z "$(calls CHECK)" || ok=1

delete_static_pod c7-fabric >/dev/null
for ((i = 0; i < 50; i++)); do [[ -n $(calls DEL "$sb_fabric") ]] && break; sleep 0.2; done
dels=$(calls DEL "$sb_fabric")
echo "containerd ran DEL for c7-fabric $(wc -w <<<"$dels") time(s), exit codes: $(for x in $dels; do cat "$x/rc"; done | paste -sd,)"
expect "deleting the Pod runs DEL" test -n "$dels" || ok=1
for x in $dels; do expect "DEL exit 0" test "$(cat "$x/rc")" == 0 || ok=1; done
expect "DEL removed c7-fabric's record" test -z "$(records | grep -F "\"c7-fabric-$RK_NODE\"")" || ok=1
# A repeated DEL (containerd's input, again) succeeds.
x=$(echo "$dels" | tail -1)
(set -a; source <(sed 's/^\([A-Z_]*\)=\(.*\)$/\1='"'"'\2'"'"'/' "$x/env")
 in_ns "$RK_WORK/fabric-cni.real" <"$x/stdin" >"$RK_WORK/del2.out" 2>&1); rc=$?
expect "a repeated DEL exits 0" test $rc == 0 || ok=1
echo "every fabric-cni call containerd made (command, Pod, sandbox, exit code):"
for d in $(ls -1 "$CNI_CALLS" | sort); do
  echo "  $(cat "$CNI_CALLS/$d/command") $(grep -o 'K8S_POD_NAME=[^;]*' "$CNI_CALLS/$d/env" | cut -d= -f2) $(grep '^CNI_CONTAINERID=' "$CNI_CALLS/$d/env" | cut -c17-28) rc=$(cat "$CNI_CALLS/$d/rc")"
done
echo "RESULT: ADD passthrough + attribution, DEL x$(wc -w <<<"$dels") + repeat ok, CHECK (replayed) ok; containerd sent: $(for c in ADD DEL CHECK STATUS GC; do echo -n "$c=$(calls $c | wc -l) "; done)"
exit $ok
