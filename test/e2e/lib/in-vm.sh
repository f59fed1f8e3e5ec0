#!/bin/bash
# Runs INSIDE the e2e VM (as PID 1's child, root): brings up the shared fixture
# (rxe0 on eth0, rdma_ucm) and runs each case script in order, each in its own
# process group with a time limit. Writes one line per case to
# OUTDIR/results.txt: "PASS name[: note]", "FAIL name: why", "SKIP name: why".
# Case protocol: exit 0 = pass, 77 = skip, anything else = fail; the reason
# (or a pass note) is the last line of $E2E_CASE_OUT/reason.
# Usage: in-vm.sh BUILD_DIR OUTDIR CASE_SCRIPT...
set -uo pipefail
BUILD_DIR=$1 OUTDIR=$2
shift 2
LIB=$(dirname "$(realpath "$0")")
RESULTS=$OUTDIR/results.txt
: > "$RESULTS"
E2E_SRC_DIR=$(realpath "$LIB/../../..")
export E2E_BUILD_DIR=$BUILD_DIR E2E_LIB=$LIB E2E_OUTDIR=$OUTDIR E2E_SRC_DIR
export E2E_IBDEV=rxe0 E2E_NETDEV=eth0 E2E_IP=10.0.2.15
# runc needs a cgroup hierarchy: the fresh sysfs has none mounted (v2 as on
# current distributions; its eBPF device filter enforces the grants). The memory
# controller is bound to a cgroup v1 hierarchy first and so never used on v2 (no
# case limits memory): runc enables every v2 controller, and a removed memory
# cgroup lingers (dying, charged page cache) and would keep memory bound to v2,
# so 09-real-kubelet could not mount the v1 memory hierarchy kubelet 1.20 needs.
mkdir -p /run/e2e-cgroup-memory && mount -t cgroup -o memory e2e-memory /run/e2e-cgroup-memory
mount -t cgroup2 cgroup2 /sys/fs/cgroup && echo "+cpu +pids" > /sys/fs/cgroup/cgroup.subtree_control
echo "kernel $(uname -r), uptime $(cut -d' ' -f1 /proc/uptime)s"

if ! "$LIB/rxe-up.sh" "$E2E_IBDEV" "$E2E_NETDEV" "$E2E_IP/24" > "$OUTDIR/fixture.log" 2>&1; then
  for c in "$@"; do
    echo "FAIL $(basename "$c" .sh): fixture: rxe-up failed (see fixture.log)" >> "$RESULTS"
  done
  dmesg | tail -30 >> "$OUTDIR/fixture.log"
  exit 1
fi

up() { cut -d' ' -f1 /proc/uptime; }
echo "fixture ready at uptime $(up)s"
failed=0
for c in "$@"; do
  name=$(basename "$c" .sh)
  export E2E_CASE_OUT=$OUTDIR/cases/$name
  mkdir -p "$E2E_CASE_OUT"
  limit=${E2E_CASE_TIMEOUT:-240}
  # A case may ask for more ("# e2e: timeout N"): the real-kubelet cases start
  # a kubelet and a node under TCG, which a busy host slows several times.
  want=$(sed -n 's/^# e2e: timeout \([0-9][0-9]*\)$/\1/p' "$c" | head -n 1)
  [ -n "$want" ] && [ -z "${E2E_CASE_TIMEOUT:-}" ] && limit=$want
  t0=$(date +%s.%N)
  # setsid: the case leads its own process group, so whatever it leaves
  # running (agent, servers) is ended below by that group id.
  setsid timeout -k 5 "$limit" bash "$c" > "$E2E_CASE_OUT/log" 2>&1 &
  pid=$!
  wait "$pid"
  rc=$?
  kill -KILL -- "-$pid" 2>/dev/null
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  reason=$(tail -n1 "$E2E_CASE_OUT/reason" 2>/dev/null)
  case $rc in
    0) echo "PASS $name${reason:+: $reason}" >> "$RESULTS" ;;
    77) echo "SKIP $name: ${reason:-no reason given}" >> "$RESULTS" ;;
    124) echo "FAIL $name: timed out after ${limit}s${reason:+ ($reason)}" >> "$RESULTS"; failed=1 ;;
    *) echo "FAIL $name: ${reason:-exit code $rc}" >> "$RESULTS"; failed=1 ;;
  esac
  echo "$name $secs" >> "$OUTDIR/case-times.txt"
  echo "case $name rc=$rc ${secs}s"
done
dmesg > "$OUTDIR/dmesg.log"
echo "all cases done at uptime $(up)s"
exit $failed
