#!/bin/bash
# 05-traffic: ibv_rc_pingpong between two processes over rxe0 (RoCE v2, the
# VM's own IPv4 GID) moves the port's hw_counters sent_pkts / rcvd_pkts.
# Later: the agent's /metrics shows them under Pod labels.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
C=/sys/class/infiniband/$IBDEV/ports/1/hw_counters
ITERS=200
gidx=$(roce_v2_ipv4_gid_index "$IBDEV") || fail "no RoCE v2 IPv4 GID on $IBDEV"
sent0=$(cat "$C/sent_pkts") rcvd0=$(cat "$C/rcvd_pkts")
start_bg pingpong-server timeout 60 ibv_rc_pingpong -d "$IBDEV" -g "$gidx" -n $ITERS
server=$BG_PID
sleep 1
timeout 60 ibv_rc_pingpong -d "$IBDEV" -g "$gidx" -n $ITERS 127.0.0.1 > "$OUT/pingpong-client.log" 2>&1
crc=$?
wait "$server"; src=$?
cat "$OUT/pingpong-client.log" "$OUT/pingpong-server.log"
((crc == 0)) || fail "ibv_rc_pingpong client exit $crc: $(tail -n 2 "$OUT/pingpong-client.log" | tr '\n' ' ')"
((src == 0)) || fail "ibv_rc_pingpong server exit $src"
sent1=$(cat "$C/sent_pkts") rcvd1=$(cat "$C/rcvd_pkts")
ds=$((sent1 - sent0)) dr=$((rcvd1 - rcvd0))
log "sent_pkts +$ds rcvd_pkts +$dr ($ITERS round trips, both ends on $IBDEV)"
# Each round trip is one send per side plus ACKs, all through this device.
((ds >= 2 * ITERS)) || fail "sent_pkts grew by $ds, want >= $((2 * ITERS))"
((dr >= 2 * ITERS)) || fail "rcvd_pkts grew by $dr, want >= $((2 * ITERS))"
pass "sent_pkts +$ds, rcvd_pkts +$dr; Pod-labelled counters on /metrics not tested yet"
