#!/bin/bash
# 02-register-allocate: the agent registers its resources with the kubelet
# simulator on the real rxe device; an Allocate of device.gpustack.ai/rdma=1
# answers with rxe0's uverbs node and rdma_cm. Leaves grant.txt (one granted
# /dev path per line) for 03-grant.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
need_exe "$AGENT"
need_exe "$KUBELET_SIM"
need_flag "$KUBELET_SIM" --expect-resources
need_flag "$KUBELET_SIM" --allocate
read -r uverbs kdev < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"

K=$TMP/kubelet
mkdir -p "$K"
# The agent starts once kubelet.sock exists (the kubelet is up before plugins).
(
  wait_for 30 test -S "$K/device-plugins/kubelet.sock" || { echo "kubelet.sock never appeared"; exit 1; }
  exec "$AGENT" --sysfs-root /sys --dev-root /dev --kubelet-root "$K" \
    --registration kubelet --metrics-address 127.0.0.1:0
) > "$OUT/agent.log" 2>&1 &
_bg_pids+=($!)
t0=$(date +%s%N)
timeout 120 "$KUBELET_SIM" --root "$K" --expect-resources 4 --allocate device.gpustack.ai/rdma=1 \
  > "$OUT/kubelet-sim.log" 2>&1
rc=$?
log "kubelet-sim exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
cat "$OUT/kubelet-sim.log"
((rc != 124)) || fail "kubelet-sim timed out (120 s) waiting for 4 resources / Allocate"
((rc == 0)) || fail "kubelet-sim exit $rc: $(tail -n 3 "$OUT/kubelet-sim.log" | tr '\n' ' ')"
L=$OUT/kubelet-sim.log
grep -q 'device.gpustack.ai/rdma' "$L" || fail "no registration of device.gpustack.ai/rdma"
# The rdma resource's device list: exactly rxe0.
rdma_devs=$(grep -E 'device.gpustack.ai/rdma\b' "$L" | grep -oE '\brxe[0-9a-z_]*\b' | sort -u | tr '\n' ' ')
[[ $rdma_devs == "rxe0 " ]] || fail "device.gpustack.ai/rdma devices '$rdma_devs', want exactly rxe0"
# The Allocate response: the granted device nodes.
grep -oE '/dev/infiniband/[a-z_]+[0-9]*' "$L" | sort -u > "$OUT/grant.txt"
grep -qx "/dev/infiniband/$uverbs" "$OUT/grant.txt" || fail "Allocate response lacks /dev/infiniband/$uverbs"
grep -qx /dev/infiniband/rdma_cm "$OUT/grant.txt" || fail "Allocate response lacks /dev/infiniband/rdma_cm"
pass
