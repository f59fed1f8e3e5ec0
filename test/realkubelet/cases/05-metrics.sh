# Case 5: /metrics attributes each Pod's devices through the real kubelet's PodResources API, with
# namespace, Pod and container; the attribution goes away when the Pod is deleted.
ok=0
mkpod c5-efa "vpc.amazonaws.com/efa=2" | run_static_pod c5-efa
mkpod c5-shared "device.gpustack.ai/rdma.shared=1" | run_static_pod c5-shared
wait_container_running c5-efa c 60 && wait_container_running c5-shared c 60 ||
  { echo "NOT OK: Pods not running"; exit 1; }
pod_series() { metrics | grep -E "^fabric_pod_device_info\{.*pod=\"$1-$RK_NODE\"" | sort; }
for p in c5-efa c5-shared; do
  want=$(pod_device_ids $p | sed 's/\.t[0-9]*$//' | sort -u)
  for ((i = 0; i < 50; i++)); do
    got=$(pod_series $p | grep -o 'device="[^"]*"' | cut -d'"' -f2 | sort -u)
    [[ -n $got && $got == "$want" ]] && break
    sleep 0.2
  done
  echo "$p: kubelet checkpoint devices $(echo $want); /metrics:"
  pod_series $p | sed 's/^/    /'
  expect "$p: /metrics attributes exactly the kubelet's devices" test -n "$want" -a "$got" == "$want" || ok=1
  expect "$p: series carry namespace, pod and container" \
    grep -q "namespace=\"default\".*pod=\"$p-$RK_NODE\"\|pod=\"$p-$RK_NODE\".*namespace=\"default\"" <<<"$(pod_series $p)" || ok=1
  expect "$p: container=\"c\"" grep -q 'container="c"' <<<"$(pod_series $p)" || ok=1
done
t0=$(date +%s.%N)
delete_static_pod c5-efa >/dev/null
for ((i = 0; i < 100; i++)); do [[ -z $(pod_series c5-efa) ]] && break; sleep 0.1; done
gone=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
expect "c5-efa's attribution goes away after deletion (${gone}s after the manifest was removed)" \
  test -z "$(pod_series c5-efa)" || ok=1
expect "c5-shared's attribution stays" test -n "$(pod_series c5-shared)" || ok=1
echo "RESULT: per-Pod series match the kubelet; removed ${gone}s after the Pod's deletion began"
exit $ok
