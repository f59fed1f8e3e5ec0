#!/bin/bash
# 06-netns: RDMA netns isolation on the real kernel.
# `rdma system set netns exclusive` (only possible while no other netns
# exists), then a process in a new netns without the device gets EPERM
# opening uverbs; then `rdma dev set rxe0 netns NS`: rxe on 6.1 has no
# disassociate_ucontext, so EOPNOTSUPP is expected. Whatever the kernel does is
# asserted consistently and reported. Later: the CNI agent's move.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
NS=e2e-ns$$
read -r uverbs _ < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"
cleanup_ns() {
  ip netns exec "$NS" rdma dev set "$IBDEV" netns /proc/1/ns/net 2>/dev/null  # back to init_net if it moved
  ip netns del "$NS" 2>/dev/null
  # Back to the default mode once the namespace is gone (best effort).
  wait_for 10 rdma system set netns shared 2>/dev/null
}
trap 'cleanup_ns; _cleanup' EXIT

log "before: $(rdma system)"
# Namespaces of earlier cases are freed asynchronously: retry EBUSY briefly.
set_out=""
wait_for 15 eval 'set_out=$(rdma system set netns exclusive 2>&1)' ||
  fail "rdma system set netns exclusive: $set_out"
mode=$(rdma system)
log "after: $mode"
grep -q 'netns exclusive' <<<"$mode" || fail "rdma system reports '$mode', want netns exclusive"

ip netns add "$NS" || fail "ip netns add failed"
in_ns=$(ip netns exec "$NS" bash -c "
  echo IBDEVS=\$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')
  exec 3<>/dev/infiniband/$uverbs && echo UVERBS_OPEN_OK" 2>&1)
echo "$in_ns"
! grep -q UVERBS_OPEN_OK <<<"$in_ns" || fail "uverbs opened from a netns that does not own $IBDEV"
grep -q 'Operation not permitted' <<<"$in_ns" || fail "open from a foreign netns: want EPERM, got: $(tr '\n' ' ' <<<"$in_ns")"
grep -q "IBDEVS=.*\b$IBDEV\b" <<<"$in_ns" && fail "$IBDEV visible in /sys/class/infiniband of the foreign netns"

# The CNI agent's own netlink code (agent/netns, via rdma-netns-probe): it must
# see the mode and either move the device or return the kernel's refusal as an
# error that names the device.
PROBE=$BUILD/agent/netns/rdma-netns-probe
agent_move="CNI agent move not tested (no $PROBE)"
if [[ -x $PROBE ]]; then
  pmode=$("$PROBE" get-mode 2>&1) || fail "rdma-netns-probe get-mode: $pmode"
  grep -qi exclusive <<<"$pmode" || fail "rdma-netns-probe get-mode says '$pmode', want exclusive"
  pout=$("$PROBE" move "$IBDEV" "/run/netns/$NS" 2>&1)
  prc=$?
  log "rdma-netns-probe move $IBDEV /run/netns/$NS: exit $prc: $pout"
  if ((prc == 0)); then
    ip netns exec "$NS" test -e "/sys/class/infiniband/$IBDEV" || fail "agent move reported success but $IBDEV not in $NS"
    "$PROBE" move-back "$IBDEV" "/run/netns/$NS" || fail "agent could not move $IBDEV back"
    wait_for 10 test -e "/sys/class/infiniband/$IBDEV" || fail "$IBDEV did not come back after the agent's move-back"
    agent_move="CNI agent moved $IBDEV and back"
  else
    grep -q "$IBDEV" <<<"$pout" || fail "agent's refusal does not name $IBDEV: $pout"
    grep -qiE 'not supported|EOPNOTSUPP' <<<"$pout" || fail "agent's refusal is not the kernel's EOPNOTSUPP: $pout"
    agent_move="CNI agent returned the kernel's refusal naming $IBDEV"
  fi
fi

move_out=$(rdma dev set "$IBDEV" netns "$NS" 2>&1)
move_rc=$?
log "rdma dev set $IBDEV netns $NS: exit $move_rc: $move_out"
if ((move_rc == 0)); then
  # Accepted: the device must now live in NS only.
  ip netns exec "$NS" test -e "/sys/class/infiniband/$IBDEV" || fail "move accepted but $IBDEV not in $NS"
  [[ ! -e /sys/class/infiniband/$IBDEV ]] || fail "move accepted but $IBDEV still in init_net"
  ip netns exec "$NS" rdma dev set "$IBDEV" netns /proc/1/ns/net || fail "could not move $IBDEV back"
  wait_for 10 test -e "/sys/class/infiniband/$IBDEV" || fail "$IBDEV did not come back to init_net"
  moved="kernel ACCEPTED the move of $IBDEV (and back)"
else
  grep -qi 'not supported' <<<"$move_out" || fail "move refused with an unexpected error: $move_out"
  [[ -e /sys/class/infiniband/$IBDEV ]] || fail "refused move but $IBDEV left init_net"
  moved="kernel refused the move: EOPNOTSUPP ($(uname -r))"
fi
pass "exclusive mode: foreign netns gets EPERM; $moved; $agent_move"
