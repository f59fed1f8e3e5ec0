#!/bin/bash
# Runs INSIDE the e2e VM: brings up a soft-RoCE device on a netdev. Idempotent.
# Adapted from the RDMA testbed recipe (shared testbed rxe-up.sh).
# Usage: rxe-up.sh [IBDEV=rxe0] [NETDEV=eth0] [IP=10.0.2.15/24]
# A missing NETDEV is created as a dummy interface.
set -euo pipefail
IBDEV=${1:-rxe0} NETDEV=${2:-eth0} IP=${3:-10.0.2.15/24}
modprobe rdma_rxe
# rdma_cm (misc, dynamic minor) appears only with rdma_ucm; rdma_rxe does not pull it in.
modprobe rdma_ucm
if ! ip link show "$NETDEV" >/dev/null 2>&1; then
  modprobe dummy
  ip link add "$NETDEV" type dummy
fi
ip link set "$NETDEV" up
ip -4 addr show dev "$NETDEV" | grep -q inet || ip addr add "$IP" dev "$NETDEV"
[[ -e /sys/class/infiniband/$IBDEV ]] || rdma link add "$IBDEV" type rxe netdev "$NETDEV"
for _ in $(seq 100); do
  grep -q ACTIVE "/sys/class/infiniband/$IBDEV/ports/1/state" 2>/dev/null && break
  sleep 0.1
done
for _ in $(seq 50); do [[ -c /dev/infiniband/rdma_cm ]] && break; sleep 0.1; done
echo "$IBDEV on $NETDEV: $(cat "/sys/class/infiniband/$IBDEV/ports/1/state")"
grep -q ACTIVE "/sys/class/infiniband/$IBDEV/ports/1/state"
