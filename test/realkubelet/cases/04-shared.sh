# Case 4: device.gpustack.ai/rdma.shared: 2 lands on two distinct devices through the real kubelet's
# GetPreferredAllocation call, with rdma_cm and NCCL_IB_HCA. Then exclusive rdma and rdma.shared are
# asked for by two Pods admitted back to back (both orders): no device may end up held both
# exclusively by one Pod and through a shared token by another.
RDMA=device.gpustack.ai/rdma SHARED=device.gpustack.ai/rdma.shared
ok=0
mkpod c4-shared "$SHARED=2" | run_static_pod c4-shared
wait_container_running c4-shared c 60 || { echo "NOT OK: Pod not running"; exit 1; }
ids=$(pod_device_ids c4-shared $SHARED)
devs=$(sed 's/\.t[0-9]*$//' <<<"$ids" | sort -u)
echo "kubelet checkpoint: c4-shared holds $(echo $ids) (devices $(echo $devs))"
expect "two tokens" test "$(wc -w <<<"$ids")" == 2 || ok=1
expect "on two distinct devices" test "$(wc -w <<<"$devs")" == 2 || ok=1
gpa=$(grep -c "Issuing a GetPreferredAllocation call for container, c, of pod $(pod_uid c4-shared)" "$(kubelet_log)")
expect "the kubelet called GetPreferredAllocation for it (its --v=4 log)" test "$gpa" -ge 1 || ok=1
seen=$(pod_exec c4-shared c ls /dev/infiniband | paste -sd' ')
env_hca=$(pod_exec c4-shared c sh -c 'echo $NCCL_IB_HCA')
echo "container: /dev/infiniband = $seen; NCCL_IB_HCA=$env_hca"
expect "rdma_cm comes with it" grep -qw rdma_cm <<<"$seen" || ok=1
for d in $devs; do
  expect "NCCL_IB_HCA names $d" grep -q "$d" <<<"$env_hca" || ok=1
  expect "the container sees $d's $(uverbs_of "$d")" grep -qw "$(uverbs_of "$d")" <<<"$seen" || ok=1
done
delete_static_pod c4-shared >/dev/null

# ---- collisions: two Pods admitted back to back --------------------------------------------------------
# Both manifests land in the static Pod folder in one rename each, within the kubelet's file check
# period, so the kubelet admits them in one pass, in file-name order, one Allocate right after the other.
ckpt_count() { checkpoint | jq -r --arg r "$1" '.Data.RegisteredDevices[$r] // [] | length'; }
n_rdma=$(rdma_devices | wc -l)
collide() {  # FIRST_NAME FIRST_RES SECOND_NAME SECOND_RES
  # Start each round from a clean node: every rdma unit healthy again in the kubelet's view (the agent
  # withdraws units of a device held through the other pool, and gives them back on release).
  local i
  for ((i = 0; i < 100; i++)); do
    [[ $(ckpt_count $RDMA) == "$n_rdma" && $(ckpt_count $SHARED) == $((n_rdma * 64)) ]] && break
    sleep 0.1
  done
  echo "  start: kubelet sees rdma=$(ckpt_count $RDMA) rdma.shared=$(ckpt_count $SHARED) healthy"
  mkpod "$1" "$2" >"$RK_MANIFESTS/.$1.tmp"
  mkpod "$3" "$4" >"$RK_MANIFESTS/.$3.tmp"
  cat "$RK_MANIFESTS/.$1.tmp" "$RK_MANIFESTS/.$3.tmp" | capacity_wait_manifest
  mv "$RK_MANIFESTS/.$1.tmp" "$RK_MANIFESTS/$1.yaml"
  mv "$RK_MANIFESTS/.$3.tmp" "$RK_MANIFESTS/$3.yaml"
  local i p1 p2
  for ((i = 0; i < 150; i++)); do
    p1=$(pod_phase "$1") p2=$(pod_phase "$3")
    [[ -n $p1 && -n $p2 && $p1 != Pending && $p2 != Pending ]] && break
    sleep 0.2
  done
  sleep 1
  local excl shared_devs overlap
  excl=$(for n in "$1" "$3"; do pod_device_ids "$n" $RDMA; done | sort -u)
  shared_devs=$(for n in "$1" "$3"; do pod_device_ids "$n" $SHARED; done | sed 's/\.t[0-9]*$//' | sort -u)
  overlap=$(comm -12 <(echo "$excl") <(echo "$shared_devs") | grep . || true)
  for n in "$1" "$3"; do
    echo "  $n: phase $(pod_phase "$n") $(pod_json "$n" | jq -r '(.status.reason // "") + " " + (.status.message // "")') holds: $(pod_device_ids "$n" | paste -sd' ')"
  done
  echo "  exclusive: $(echo $excl); shared-token devices: $(echo $shared_devs)"
  expect "$1 then $3: no device held both exclusively and through a shared token${overlap:+ (both: $(echo $overlap))}" \
    test -z "$overlap" || ok=1
  delete_static_pod "$1" >/dev/null
  delete_static_pod "$3" >/dev/null
}
echo "round 1: exclusive rdma: 1, then rdma.shared: 2"
collide c4a-excl "$RDMA=1" c4b-shared "$SHARED=2"
echo "round 2: rdma.shared: 2, then exclusive rdma: 1"
collide c4c-shared "$SHARED=2" c4d-excl "$RDMA=1"
echo "round 3: rdma.shared: 1, then exclusive rdma: 2 (every rdma device)"
collide c4e-shared "$SHARED=1" c4f-excl "$RDMA=2"
echo "RESULT: rdma.shared: 2 on $(echo $devs) with rdma_cm + NCCL_IB_HCA; collision rounds: $([[ $ok == 0 ]] && echo no overlap || echo OVERLAP)"
exit $ok
