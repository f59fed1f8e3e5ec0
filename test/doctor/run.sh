#!/usr/bin/env bash
# The fabric doctor, black-box: three real fabric-agent --doctor processes,
# each in its own network namespace, joined by veth pairs to a bridge that
# lives in a fourth namespace, probing each other over the libfabric tcp
# provider. Faults: an iptables DROP of the fabric traffic only (control
# channel open) -> fabric-unreachable within four periods (a failure shows
# after its re-probe in the next period); a link taken down
# -> peer-down; recovery after each fault is removed; garbage on the control
# channel and on a fabric endpoint is counted and nothing crashes. Also checks
# the example alert rules with promtool and measures time-to-detect and the
# probe cost (CPU of an agent with --doctor against one without, same run).
#
# Usage: test/doctor/run.sh BUILD_DIR   (root; prints PASS/FAIL lines and "N passed, N failed")
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
AGENT=$BUILD/agent/daemon/fabric-agent
CTL=$BUILD/tools/fabricctl/fabricctl
PERIOD=${DOCTOR_PERIOD:-1}
NODE_TREE=$ROOT/test/testdata/nodes/mlx5-roce-sriov
N=3

if [ "$(id -u)" != 0 ]; then echo "SKIP: doctor netns test needs root (ip netns, iptables)"; exit 0; fi
for t in ip iptables curl jq bc; do
  command -v $t >/dev/null || { echo "SKIP: doctor netns test needs $t"; exit 0; }
done
[ -x "$AGENT" ] && [ -x "$CTL" ] || { echo "FAIL: build fabric-agent and fabricctl in $BUILD first"; echo "0 passed, 1 failed"; exit 1; }

pass=0; fail=0
ok() { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

TAG=fd$$
WORK=$(mktemp -d /tmp/doctor-netns.XXXXXX)
BR=${TAG}br
declare -a PIDS
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
  for i in $(seq $N) 0; do ip netns del ${TAG}n$i 2>/dev/null; done
  ip netns del "$BR" 2>/dev/null
  [ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT

ns() { local i=$1; shift; ip netns exec ${TAG}n$i "$@"; }
addr() { echo 10.77.0.$1; }

# ---- topology -------------------------------------------------------------
if ! ip netns add "$BR" 2>/dev/null; then echo "SKIP: cannot create network namespaces here"; exit 0; fi
ip -n "$BR" link add br0 type bridge && ip -n "$BR" link set br0 up && ip -n "$BR" link set lo up
for i in $(seq $N) 0; do
  ip netns add ${TAG}n$i
  ip link add v$TAG$i type veth peer name b$TAG$i
  ip link set v$TAG$i netns ${TAG}n$i
  ip link set b$TAG$i netns "$BR"
  ip -n "$BR" link set b$TAG$i master br0 up
  ip -n ${TAG}n$i link set lo up
  ip -n ${TAG}n$i link set v$TAG$i name eth0
  ip -n ${TAG}n$i addr add 10.77.0.$((i == 0 ? 100 : i))/24 dev eth0
  ip -n ${TAG}n$i link set eth0 up
done
for i in $(seq $N); do printf '10.77.0.%d:7946\n' "$i"; done > "$WORK/peers"

start_agent() {  # i, extra flags...
  local i=$1; shift
  mkdir -p "$WORK/a$i/kubelet" "$WORK/a$i/state" "$WORK/a$i/cdi"
  ip netns exec ${TAG}n$i env NODE_NAME=node$i FABRIC_LOG_LEVEL=info "$AGENT" --sysfs-root "$NODE_TREE/sys" \
    --dev-root "$NODE_TREE/dev" --kubelet-root "$WORK/a$i/kubelet" \
    --device-plugin-dir "$WORK/a$i/kubelet/device-plugins" --registration watcher \
    --state-dir "$WORK/a$i/state" --cdi-dir "$WORK/a$i/cdi" --write-cdi=false \
    --metrics-address "$(addr "$i"):9435" "$@" >> "$WORK/a$i/agent.log" 2>&1 &
  PIDS[$i]=$!
}
doctor_flags() {  # i
  echo --doctor --doctor-peers "file:$WORK/peers" --doctor-provider tcp \
    --doctor-address "$(addr "$1"):7946" --doctor-period ${PERIOD}s
}
for i in $(seq $N); do start_agent "$i" $(doctor_flags "$i"); done

# The doctor's JSON from node i; fails (and prints nothing) when there is none
# (jq -e succeeds on empty input, so every predicate goes through this).
doctor_json() {
  local out; out=$(ns "$1" "$CTL" doctor --agent "$(addr "$1"):9435" -o json 2>/dev/null)
  [ -n "$out" ] && echo "$out"
}
metric() {  # i, regex -> first value
  ns "$1" curl -s --max-time 3 "http://$(addr "$1"):9435/metrics" | grep -E "$2" | head -1 | awk '{print $NF}'
}
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
# wait_for SECONDS CMD...: polls every 0.1 s; prints the seconds it took.
wait_for() {
  local limit=$1; shift; local t0; t0=$(now)
  while true; do
    if "$@" >/dev/null 2>&1; then elapsed "$t0"; return 0; fi
    if [ "$(echo "$(now) - $t0 > $limit" | bc)" = 1 ]; then return 1; fi
    sleep 0.1
  done
}
# node i's pairs towards node j: for ok every pair answers; for a fault at
# least one pair shows it and none shows the other fault (pairs not probed
# since the fault may still carry their last success).
pairs_to() {  # i j verdict
  local j; j=$(doctor_json "$1") || return 1
  echo "$j" | jq -e --arg p "node$2" --arg v "$3" '
    def v: if .reachable then "ok" elif .control_reachable then "fabric-unreachable" else "peer-down" end;
    [.pairs[] | select(.peer_node == $p) | v] as $vs | ($vs | length) > 0 and
    (if $v == "ok" then ($vs | all(. == "ok"))
     else ($vs | any(. == $v)) and ($vs | all(. == $v or . == "ok")) end)'
}
verdict_is() {  # i verdict
  local j; j=$(doctor_json "$1") || return 1
  echo "$j" | jq -e --arg v "$2" '.verdict == $v'
}
all_ok() { for i in $(seq $N); do verdict_is "$i" ok || return 1; done; }
# Every node has pairs to both other nodes, each with a peer device and an RTT.
complete() {
  local j
  for i in $(seq $N); do
    j=$(doctor_json "$i") || return 1
    echo "$j" | jq -e '.verdict == "ok" and ([.pairs[].peer_node] | unique | length) == 2
      and (.pairs | all(.peer_device != "" and .rtt_seconds > 0))' || return 1
  done
}

# ---- 1. every pair reachable -------------------------------------------------
if t=$(wait_for 40 complete); then
  ok "all $N agents see every peer reachable over tcp (${t}s after start)"
else
  bad "not all pairs reachable within 40s: $(doctor_json 1 | jq -c '.pairs[] | [.peer_node,.local_device,.peer_device,.reachable,.control_reachable,.last_error]' | head -5)"
fi
j=$(doctor_json 1)
np=$(echo "$j" | jq '[.pairs[] | .peer_node] | unique | length')
ndev=$(echo "$j" | jq '[.pairs[] | .local_device] | unique | length')
if [ "$np" = 2 ] && [ "$ndev" -ge 2 ] && echo "$j" | jq -e '.pairs | all(.rtt_seconds > 0 and .provider == "tcp;ofi_rxm")' >/dev/null; then
  ok "node1's matrix: $(echo "$j" | jq '.pairs | length') pairs, 2 peers, $ndev local devices, RTT set, provider tcp;ofi_rxm"
else
  bad "node1's matrix is not complete: peers=$np devices=$ndev"
fi
ns 1 "$CTL" doctor --agent "$(addr 1):9435" > "$WORK/table.txt"; rc=$?
[ $rc = 0 ] && grep -q "doctor on node1: ok" "$WORK/table.txt" && ok "fabricctl doctor (table) exits 0 on ok" || bad "fabricctl doctor exit $rc: $(head -2 "$WORK/table.txt")"
if ns 1 curl -s "http://$(addr 1):9435/metrics" | grep -q 'fabric_peer_reachable{peer_node="node2",local_device="mlx5_'; then
  ok "/metrics carries fabric_peer_reachable{peer_node,local_device,peer_device,provider}"
else
  bad "/metrics has no fabric_peer_reachable series"
fi

# ---- 1b. fabricctl doctor --bench PEER: 1 MiB write/read over the doctor's provider ----
ip netns exec ${TAG}n2 "$CTL" bench --listen 18515 --provider tcp > "$WORK/bench-server.log" 2>&1 &
PIDS[5]=$!
sleep 0.5
ns 1 "$CTL" doctor --bench "$(addr 2)" --agent "$(addr 1):9435" --duration 1 \
  > "$WORK/bench.out" 2> "$WORK/bench.err"; rc=$?
if [ $rc = 0 ] && head -1 "$WORK/bench.out" | grep -q '^provider: tcp;ofi_rxm (requested tcp)' \
   && grep -q '^read ' "$WORK/bench.out"; then
  ok "fabricctl doctor --bench node2: provider line first, write/read measured ($(grep '^write' "$WORK/bench.out" | awk '{print $2, $3}'))"
else
  bad "fabricctl doctor --bench: exit $rc $(head -2 "$WORK/bench.out") $(tail -2 "$WORK/bench.err")"
fi
wait "${PIDS[5]}" 2>/dev/null

# ---- 2. fabric DROP on node3, control left open -------------------------------
# Everything TCP except the control channel (7946) and HTTP (9435) is the
# fabric (the tcp provider's endpoints listen on ephemeral ports).
drop_fabric() {  # i add|del
  local op=-A; [ "$2" = del ] && op=-D
  for chain in INPUT OUTPUT; do
    ns "$1" iptables $op $chain -p tcp -m multiport ! --ports 7946,9435 -j DROP
  done
}
# The bar, from the scheme: up to one period until the next round, the round
# whose probe fails, and the next round whose re-probe fails too (a failure
# shows only then), each round within a period plus its timeouts.
DETECT=$((4 * PERIOD + 1))
drop_fabric 3 add
if t=$(wait_for $DETECT pairs_to 1 3 fabric-unreachable); then
  ok "iptables DROP of node3's fabric: node1 says fabric-unreachable for node3 in ${t}s (period ${PERIOD}s)"
  echo "MEASURE time_to_detect_fabric_unreachable_s=$t period_s=$PERIOD"
else
  bad "no fabric-unreachable for node3 within ${DETECT}s: $(doctor_json 1 | jq -c '[.verdict, [.pairs[] | select(.peer_node=="node3") | [.reachable,.control_reachable,.last_error]][0]]')"
fi
ns 1 "$CTL" doctor --agent "$(addr 1):9435" > "$WORK/table.txt"; rc=$?
if [ $rc = 10 ] && grep -q "likely cause (fabric-unreachable): control channel answers but fabric probes do not: security group" "$WORK/table.txt"; then
  ok "fabricctl doctor exits 10 and names the likely cause (security group / placement / routing)"
else
  bad "fabricctl doctor exit $rc on fabric-unreachable: $(grep -i cause "$WORK/table.txt")"
fi
if pairs_to 1 2 ok >/dev/null; then ok "node1-node2 stays ok while node3's fabric is dropped"; else bad "node1-node2 affected by node3's fault: $(doctor_json 1 | jq -c '[.pairs[] | select(.peer_node=="node2" and (.reachable|not)) | [.local_device,.peer_device,.last_error]]')"; fi
drop_fabric 3 del
if t=$(wait_for 30 pairs_to 1 3 ok); then
  ok "recovery after the DROP is removed: node1 sees node3 ok again in ${t}s"
  echo "MEASURE time_to_recover_after_drop_s=$t"
else
  bad "no recovery within 30s of removing the DROP"
fi

# ---- 3. link down -> peer-down ----------------------------------------------------
ip -n "$BR" link set b${TAG}3 down
if t=$(wait_for $DETECT pairs_to 1 3 peer-down); then
  ok "link of node3 down: node1 says peer-down for node3 in ${t}s"
  echo "MEASURE time_to_detect_peer_down_s=$t"
else
  bad "no peer-down for node3 within ${DETECT}s: $(doctor_json 1 | jq -c '[.verdict, [.pairs[] | select(.peer_node=="node3") | [.reachable,.control_reachable,.last_error]][0]]')"
fi
ns 1 "$CTL" doctor --agent "$(addr 1):9435" -o json > "$WORK/pd.json"; rc=$?
if [ $rc = 11 ] && jq -e '.verdict == "peer-down" and (keys == ["pairs","verdict"])' "$WORK/pd.json" >/dev/null; then
  ok "fabricctl doctor -o json: verdict peer-down, exit 11, exactly {verdict, pairs}"
else
  bad "fabricctl doctor -o json on peer-down: exit $rc $(jq -c 'keys' "$WORK/pd.json" 2>&1)"
fi
ip -n "$BR" link set b${TAG}3 up
if t=$(wait_for 30 all_ok); then
  ok "link back up: every agent ok again in ${t}s"
  echo "MEASURE time_to_recover_after_link_up_s=$t"
else
  bad "no recovery within 30s of the link coming back"
fi

# ---- 4. garbage on both channels ----------------------------------------------------
# From the spare namespace: random bytes, an HTTP request and an oversized
# frame at node2's control port, and random bytes at each fabric endpoint.
g0=$(metric 2 'fabric_doctor_events_total\{event="garbage_control"\}'); g0=${g0:-0}
for k in 1 2 3 4 5; do
  ns 0 timeout 3 bash -c "head -c $((k * 997)) /dev/urandom > /dev/tcp/$(addr 2)/7946" 2>/dev/null
done
ns 0 timeout 3 bash -c "printf 'GET / HTTP/1.0\r\n\r\n' > /dev/tcp/$(addr 2)/7946" 2>/dev/null
ns 0 timeout 3 bash -c "printf '\xff\xff\xff\xffFDOC' > /dev/tcp/$(addr 2)/7946" 2>/dev/null
fabric_ports=$(ns 2 curl -s "http://$(addr 2):9435/v1/peers" | jq -r '.endpoints[].address' | sed -n 's/.*:\([0-9]*\)$/\1/p')
for p in $fabric_ports; do
  ns 0 timeout 3 bash -c "head -c 4096 /dev/urandom > /dev/tcp/$(addr 2)/$p" 2>/dev/null
done
sleep $((2 * PERIOD + 1))
g1=$(metric 2 'fabric_doctor_events_total\{event="garbage_control"\}'); g1=${g1:-0}
if kill -0 "${PIDS[2]}" 2>/dev/null && [ "$g1" -ge $((g0 + 5)) ]; then
  ok "garbage on node2's control channel counted ($g0 -> $g1) and the agent lives"
else
  bad "control garbage: agent alive=$(kill -0 "${PIDS[2]}" 2>/dev/null && echo yes || echo no) count $g0 -> $g1"
fi
if [ -n "$fabric_ports" ] && t=$(wait_for 15 all_ok); then
  ok "garbage at node2's $(echo $fabric_ports | wc -w) fabric endpoint(s): nothing crashed, all pairs ok (${t}s)"
else
  bad "after fabric garbage: ports='$fabric_ports' $(doctor_json 1 | jq -c '.verdict')"
fi

# ---- 5. probe cost: CPU of a doctor agent vs a plain one, same run ---------------
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
# A fourth agent without the doctor, in the spare namespace, as the baseline.
mkdir -p "$WORK/a0/kubelet" "$WORK/a0/state" "$WORK/a0/cdi"
ip netns exec ${TAG}n0 env NODE_NAME=node0 "$AGENT" --sysfs-root "$NODE_TREE/sys" --dev-root "$NODE_TREE/dev" \
  --kubelet-root "$WORK/a0/kubelet" --device-plugin-dir "$WORK/a0/kubelet/device-plugins" --registration watcher --state-dir "$WORK/a0/state" \
  --cdi-dir "$WORK/a0/cdi" --write-cdi=false --metrics-address "10.77.0.100:9435" \
  >> "$WORK/a0/agent.log" 2>&1 &
PIDS[0]=$!
sleep 2
WINDOW=${DOCTOR_COST_WINDOW:-10}
b0=$(cpu_ticks "${PIDS[0]}"); d0=$(cpu_ticks "${PIDS[1]}")
p0=$(metric 1 'fabric_doctor_events_total\{event="probes_sent"\}')
r0=$(metric 1 'fabric_doctor_events_total\{event="replies_sent"\}')
sleep "$WINDOW"
b1=$(cpu_ticks "${PIDS[0]}"); d1=$(cpu_ticks "${PIDS[1]}")
p1=$(metric 1 'fabric_doctor_events_total\{event="probes_sent"\}')
r1=$(metric 1 'fabric_doctor_events_total\{event="replies_sent"\}')
hz=$(getconf CLK_TCK)
probes=$(echo "($p1 - $p0) / $WINDOW" | bc -l); replies=$(echo "($r1 - $r0) / $WINDOW" | bc -l)
echo "MEASURE window_s=$WINDOW probes_per_s=$(printf %.1f "$probes") replies_per_s=$(printf %.1f "$replies") \
cpu_doctor_agent_pct=$(echo "100 * ($d1 - $d0) / $hz / $WINDOW" | bc -l | xargs printf %.2f) \
cpu_plain_agent_pct=$(echo "100 * ($b1 - $b0) / $hz / $WINDOW" | bc -l | xargs printf %.2f) \
devices=$ndev peers=2"
if [ "$(echo "$probes > 0" | bc)" = 1 ]; then ok "probe cost measured (see MEASURE lines)"; else bad "no probes counted"; fi

# ---- 6. fabric-doctor (the doctor-only binary of the opt-in container) ------------
DOC=$BUILD/agent/doctor/fabric-doctor
if [ -x "$DOC" ]; then
  { cat "$WORK/peers"; echo 10.77.0.100:7946; } > "$WORK/peers0"
  ip netns exec ${TAG}n0 env NODE_NAME=doctor0 "$DOC" --sysfs-root "$NODE_TREE/sys" \
    --dev-root "$NODE_TREE/dev" --metrics-address 10.77.0.100:9436 \
    --doctor-peers "file:$WORK/peers0" --doctor-provider tcp --doctor-address 10.77.0.100:7946 \
    --doctor-period ${PERIOD}s >> "$WORK/doctor0.log" 2>&1 &
  PIDS[4]=$!
  doc0_ok() {
    local j; j=$(ns 0 "$CTL" doctor --agent 10.77.0.100:9436 -o json 2>/dev/null) || return 1
    [ -n "$j" ] && echo "$j" | jq -e '.verdict == "ok" and ([.pairs[].peer_node] | unique | length) == 3'
  }
  if t=$(wait_for 30 doc0_ok); then
    ok "fabric-doctor (no device-plugin servers) sees the 3 agents ok in ${t}s"
  else
    bad "fabric-doctor: $(ns 0 "$CTL" doctor --agent 10.77.0.100:9436 2>&1 | head -3)"
  fi
fi

# ---- 7. alert rules ---------------------------------------------------------------
# Every example rule file in deploy/prometheus, and the unit tests beside them.
if command -v promtool >/dev/null; then
  for RULES in "$ROOT"/deploy/prometheus/*-alerts.yaml; do
    if promtool check rules "$RULES" > "$WORK/promtool.log" 2>&1; then
      ok "promtool check rules $(basename "$RULES")"
    else
      bad "promtool: $(tail -3 "$WORK/promtool.log")"
    fi
  done
  for TESTS in "$ROOT"/deploy/prometheus/*-alerts.test.yaml; do
    [ -f "$TESTS" ] || continue
    if (cd "$(dirname "$TESTS")" && promtool test rules "$(basename "$TESTS")") > "$WORK/promtool.log" 2>&1; then
      ok "promtool test rules $(basename "$TESTS")"
    else
      bad "promtool test: $(tail -5 "$WORK/promtool.log")"
    fi
  done
else
  echo "SKIP: promtool not installed (alert rules not checked)"
fi

for i in $(seq $N); do
  kill -0 "${PIDS[$i]}" 2>/dev/null || { bad "agent $i died (see its log)"; tail -5 "$WORK/a$i/agent.log"; }
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
