# Case 2: a static Pod asking for vpc.amazonaws.com/efa: 2 sees exactly its two uverbs nodes with
# their real device numbers and no rdma_cm; its container's device cgroup allows exactly those two
# of the node's fabric devices; opening them is not EPERM (ENXIO: no driver behind the fake node).
ok=0
mkpod c2-efa "vpc.amazonaws.com/efa=2" | run_static_pod c2-efa
wait_pod c2-efa Running 60 && wait_container_running c2-efa c 30 || { echo "NOT OK: Pod not running"; exit 1; }

ids=$(pod_device_ids c2-efa vpc.amazonaws.com/efa)
shape=$(checkpoint | jq -r '[.Data.PodDeviceEntries[].DeviceIDs | type] | unique | join(",")')
echo "kubelet checkpoint: PodDeviceEntries[].DeviceIDs is a JSON $shape"
expect "the checkpoint keys DeviceIDs by NUMA node (DevicesPerNUMA), as kubelet-sim writes it" \
  test "$shape" == object || ok=1
echo "kubelet checkpoint: granted $(echo $ids)"
expect "the kubelet granted 2 EFA device IDs" test "$(wc -w <<<"$ids")" == 2 || ok=1
want_nodes="" want_nums=""
for id in $ids; do
  u=$(uverbs_of "$id")
  want_nodes+="$u"$'\n'
  want_nums+="c $(cat "$TREE/sys/class/infiniband_verbs/$u/dev") rw"$'\n'
done
want_nodes=$(sort <<<"${want_nodes%$'\n'}")
want_nums=$(sort <<<"${want_nums%$'\n'}")

seen=$(pod_exec c2-efa c ls /dev/infiniband | sort)
echo "container /dev/infiniband: $(echo $seen)"
expect "the container sees exactly its two uverbs nodes" test "$seen" == "$want_nodes" || ok=1
expect "no rdma_cm in an EFA-only grant" test -z "$(grep rdma_cm <<<"$seen")" || ok=1
for u in $want_nodes; do
  got=$(pod_exec c2-efa c stat -c '%t:%T' "/dev/infiniband/$u")
  want=$(cat "$TREE/sys/class/infiniband_verbs/$u/dev")
  got=$((16#${got%%:*})):$((16#${got##*:}))
  expect "$u carries the node's numbers $want (got $got)" test "$got" == "$want" || ok=1
done

cg=$(cgroup_node_devs c2-efa)
echo "device cgroup (fabric devices only): $(echo "$cg" | paste -sd',')"
expect "the device cgroup allows exactly the two granted nodes" test "$cg" == "$want_nums" || ok=1

json=$(check_in c2-efa)
echo "fabricctl check: $(jq -c '{verdict, devices: [.devices[] | {name, open, error}]}' <<<"$json")"
for u in $want_nodes; do
  e=$(jq -r --arg n "$u" '.devices[] | select(.name | split("/") | last == $n) | .error // "none"' <<<"$json")
  expect "opening $u is not EPERM ($e)" test -n "$e" -a "${e#EPERM}" == "$e" -a "${e#EACCES}" == "$e" || ok=1
done
echo "RESULT: granted $(echo $ids) = $(echo $want_nodes), cgroup allows exactly them, open: $(jq -r '[.devices[] | .error // "ok"] | unique | join(",")' <<<"$json")"
exit $ok
