#!/bin/bash
# 02-register-allocate: the agent registers its resources with the kubelet
# simulator on the real rxe device; an Allocate of device.gpustack.ai/rdma=1
# answers with rxe0's uverbs node and rdma_cm. Leaves grant.txt (one granted
# host /dev path per line) for 03-grant.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
need_exe "$AGENT"
need_exe "$KUBELET_SIM"
need_flag "$KUBELET_SIM" --expect-resources
need_flag "$KUBELET_SIM" --allocate
read -r uverbs _ < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"
RES=device.gpustack.ai/rdma

t0=$(date +%s%N)
start_agent_with_sim "$TMP/kubelet" --expect-resources 4 --allocate "$RES=1" --timeout 90s
wait_for 120 eval '! pid_alive $SIM_PID' || fail "kubelet-sim still running after 120 s"
wait "$SIM_PID"; rc=$?
log "kubelet-sim exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
L=$OUT/kubelet-sim.log
cat "$L"
((rc != 2)) || fail "kubelet-sim timed out: $(grep -m1 timeout "$L")"
((rc == 0)) || fail "kubelet-sim exit $rc: $(tail -n 3 "$L" | tr '\n' ' ')"
grep -qE "resource=$RES .* OK\$" "$L" || fail "no successful registration of $RES"
devs=$(sim_devices "$L" "$RES" | tr '\n' ',')
[[ $devs == "$IBDEV Healthy," ]] || fail "$RES devices '$devs', want exactly '$IBDEV Healthy'"
sim_granted "$L" | tee "$OUT/grant-full.txt"
awk '{print $1}' "$OUT/grant-full.txt" > "$OUT/grant.txt"
grep -qx "/dev/infiniband/$uverbs" "$OUT/grant.txt" || fail "Allocate response lacks /dev/infiniband/$uverbs"
grep -qx /dev/infiniband/rdma_cm "$OUT/grant.txt" || fail "Allocate response lacks /dev/infiniband/rdma_cm"
pass "$RES = [$IBDEV]; Allocate grants $(paste -sd" " "$OUT/grant.txt")"
