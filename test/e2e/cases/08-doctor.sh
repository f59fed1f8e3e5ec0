#!/bin/bash
# 08-doctor: the fabric doctor over verbs;ofi_rxm on real soft-RoCE devices.
# Two network namespaces joined by a veth pair, an rxe device on each end,
# one fabric-doctor per namespace (each device's own provider, no --doctor-
# provider): every pair ok; an iptables DROP of RoCEv2 (UDP 4791) in one
# namespace, control channel left open -> fabric-unreachable; recovery after
# the DROP is removed.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
DOCTOR=$BUILD/agent/doctor/fabric-doctor
need_exe "$DOCTOR"
need_exe "$FABRICCTL"
command -v iptables >/dev/null || skip "iptables not installed"
A=e2e-da$$ B=e2e-db$$
DOCTOR_PIDS=()
cleanup_doctor() {
  # The doctors first: deleting an rxe link waits for every user to close it.
  for p in "${DOCTOR_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${DOCTOR_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  ip netns exec "$A" rdma link delete rxeA 2>/dev/null
  ip netns exec "$B" rdma link delete rxeB 2>/dev/null
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
}
trap 'cleanup_doctor; _cleanup' EXIT
PERIOD=5  # probe timeout 2 s: rxm connects over rdma_cm slowly under TCG

ip netns add "$A" && ip netns add "$B" || fail "ip netns add failed"
ip link add vA type veth peer name vB || fail "veth"
ip link set vA netns "$A" && ip link set vB netns "$B" || fail "veth into netns"
ip -n "$A" addr add 192.168.88.1/24 dev vA && ip -n "$A" link set vA up && ip -n "$A" link set lo up
ip -n "$B" addr add 192.168.88.2/24 dev vB && ip -n "$B" link set vB up && ip -n "$B" link set lo up
ip netns exec "$A" rdma link add rxeA type rxe netdev vA || fail "rdma link add rxeA"
ip netns exec "$B" rdma link add rxeB type rxe netdev vB || fail "rdma link add rxeB"
log "$(rdma link show)"
# Prerequisite, independent of our code: can RC traffic flow between rxe
# devices whose netdevs live in two namespaces? (On Linux 6.1 rxe's UDP socket
# exists in init_net only, so rxe on a veth end inside a namespace cannot
# receive; rdma_cm connects then time out.)
command -v ibv_rc_pingpong >/dev/null || skip "ibv_rc_pingpong not installed"
gid=$(for g in /sys/class/infiniband/rxeB/ports/1/gids/*; do
  [[ $(cat "$g") == *:c0a8:5802 ]] && basename "$g"; done | head -1)
ip netns exec "$B" timeout 12 ibv_rc_pingpong -d rxeB -g "${gid:-1}" -n 5 > "$OUT/pingpong-server.log" 2>&1 &
pp=$!
sleep 1
if ! ip netns exec "$A" timeout 8 ibv_rc_pingpong -d rxeA -g "${gid:-1}" -n 5 192.168.88.2 \
     > "$OUT/pingpong-client.log" 2>&1; then
  kill "$pp" 2>/dev/null
  skip "kernel $(uname -r): RC traffic between rxe devices in two network namespaces does not flow (ibv_rc_pingpong fails: $(tail -1 "$OUT/pingpong-client.log")); rxe needs per-netns UDP sockets"
fi
wait "$pp" 2>/dev/null
printf '192.168.88.1:7946\n192.168.88.2:7946\n' > "$OUT/peers"
for n in A B; do
  ns=$A ip=192.168.88.1
  [[ $n == B ]] && ns=$B ip=192.168.88.2
  # ofi_rxm sizes verbs CQs by FI_UNIVERSE_SIZE; rxe's max_cqe is 32767.
  ip netns exec "$ns" env NODE_NAME=node$n FI_UNIVERSE_SIZE=64 FI_LOG_LEVEL=warn "$DOCTOR" --sysfs-root /sys \
    --dev-root /dev --metrics-address "$ip:9436" --doctor-peers "file:$OUT/peers" \
    --doctor-address "$ip:7946" --doctor-period ${PERIOD}s > "$OUT/doctor$n.log" 2>&1 &
  DOCTOR_PIDS+=($!)
done
doc() { ip netns exec "$A" "$FABRICCTL" doctor --agent 192.168.88.1:9436 -o json 2>/dev/null; }
rxe_pairs() {  # verdict: every pair rxeA -> nodeB/rxeB is in it
  local j; j=$(doc) || true
  [[ -n $j ]] && jq -e --arg v "$1" '[.pairs[] | select(.local_device == "rxeA" and .peer_node == "nodeB"
      and .peer_device == "rxeB")] as $p | ($p | length) > 0 and ($p | all(
      if $v == "ok" then .reachable and (.provider | startswith("verbs"))
      else (.reachable | not) and .control_reachable end))' <<<"$j" >/dev/null
}
t0=$(date +%s)
wait_for 120 rxe_pairs ok || fail "rxeA -> rxeB never ok over verbs: $(doc | jq -c '.pairs' | head -c 600); $(tail -3 "$OUT/doctorA.log")"
log "ok after $(($(date +%s) - t0))s: $(doc | jq -c '[.pairs[] | select(.local_device=="rxeA")]')"
ip netns exec "$B" iptables -A INPUT -p udp --dport 4791 -j DROP || fail "iptables in $B"
ip netns exec "$B" iptables -A OUTPUT -p udp --dport 4791 -j DROP
t1=$(date +%s.%N)
wait_for $((3 * PERIOD + 2)) rxe_pairs fabric-unreachable ||
  fail "no fabric-unreachable within 3 periods of dropping RoCEv2: $(doc | jq -c '[.pairs[] | select(.local_device=="rxeA")]')"
detect=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
ip netns exec "$B" iptables -D INPUT -p udp --dport 4791 -j DROP
ip netns exec "$B" iptables -D OUTPUT -p udp --dport 4791 -j DROP
t2=$(date +%s.%N)
wait_for 60 rxe_pairs ok || fail "no recovery within 60s of removing the DROP: $(doc | jq -c '[.pairs[] | select(.local_device=="rxeA")]')"
recover=$(awk -v a="$t2" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
pass "verbs;ofi_rxm rxeA<->rxeB ok; RoCEv2 DROP -> fabric-unreachable in ${detect}s (period ${PERIOD}s), ok again ${recover}s after"
