#!/bin/bash
# 01-discovery: the kernel's view of the soft-RoCE device, then the same facts
# through `fabricctl devices -o json` (agent discovery) once that exists.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
D=/sys/class/infiniband/$IBDEV

# --- the kernel's facts (also a smoke test of the harness itself) ---
check "$D missing" test -d "$D"
state=$(cat "$D/ports/1/state"); log "state: $state"
[[ $state == "4: ACTIVE" ]] || fail "$IBDEV port 1 state is '$state', want '4: ACTIVE'"
ll=$(cat "$D/ports/1/link_layer")
[[ $ll == Ethernet ]] || fail "$IBDEV link_layer '$ll', want Ethernet"
parent=$(cat "$D/parent")
[[ $parent == "$NETDEV" ]] || fail "$IBDEV parent '$parent', want $NETDEV"
[[ ! -e $D/device ]] || fail "$IBDEV has a device link (a soft device should have no PCI parent)"
read -r uverbs kdev < <(ibdev_uverbs "$IBDEV") || fail "no infiniband_verbs entry for $IBDEV"
log "$IBDEV -> $uverbs ($kdev)"
check "/dev/infiniband/$uverbs is not a char device" test -c "/dev/infiniband/$uverbs"
node=$(devnode_numbers "/dev/infiniband/$uverbs")
[[ $node == "$kdev" ]] || fail "/dev/infiniband/$uverbs is $node, sysfs says $kdev"
check "/dev/infiniband/rdma_cm missing (rdma_ucm not loaded?)" test -c /dev/infiniband/rdma_cm
cm_sysfs=$(cat /sys/class/misc/rdma_cm/dev)
[[ $(devnode_numbers /dev/infiniband/rdma_cm) == "$cm_sysfs" ]] || fail "rdma_cm node numbers differ from sysfs $cm_sysfs"
log "kernel facts ok: $IBDEV $uverbs=$kdev rdma_cm=$cm_sysfs netdev=$parent"

# --- fabricctl devices ---
facts="kernel facts only ($IBDEV $uverbs=$kdev ACTIVE Ethernet)"
[[ -x $FABRICCTL ]] || pass "$facts; fabricctl not built yet"
"$FABRICCTL" devices -o json --sysfs-root /sys --dev-root /dev > "$OUT/devices.json" 2> "$OUT/devices.err"
rc=$?
if ((rc != 0)); then
  if grep -q 'not available in this build' "$OUT/devices.err"; then
    pass "$facts; fabricctl devices not implemented yet"
  fi
  fail "fabricctl devices exit $rc: $(head -c 300 "$OUT/devices.err")"
fi
cat "$OUT/devices.json"
jq -e . "$OUT/devices.json" >/dev/null || fail "fabricctl devices -o json is not JSON"
dev=$(jq -c --arg n "$IBDEV" '.devices[]? | select(.name == $n)' "$OUT/devices.json")
[[ -n $dev ]] || fail "fabricctl devices does not list $IBDEV"
log "device: $dev"
q() { jq -r "$1" <<<"$dev"; }
[[ $(q .kind) == rdma ]] || fail "$IBDEV kind '$(q .kind)', want rdma"
[[ $(q .pci) == null ]] || fail "$IBDEV has PCI info $(q .pci), want none"
[[ $(q .uverbs.dev) == "$kdev" ]] || fail "$IBDEV uverbs '$(q .uverbs.dev)', kernel says $kdev"
[[ $(q .uverbs.path) == "/dev/infiniband/$uverbs" ]] || fail "$IBDEV uverbs path '$(q .uverbs.path)'"
[[ $(q '.ports[0].state') == ACTIVE ]] || fail "$IBDEV port state '$(q '.ports[0].state')', want ACTIVE"
[[ $(q '.ports[0].link_layer') == Ethernet ]] || fail "$IBDEV link_layer '$(q '.ports[0].link_layer')'"
[[ $(q .netdev) == "$NETDEV" ]] || fail "$IBDEV netdev '$(q .netdev)', want $NETDEV"
cm=$(jq -r '.rdma_cm.dev // empty' "$OUT/devices.json")
[[ $cm == "$cm_sysfs" ]] || fail "rdma_cm '$cm', kernel says $cm_sysfs"
pool=$(jq -r '.pools[]? | select(.name == "device.gpustack.ai/rdma") | .devices | join(",")' "$OUT/devices.json")
[[ $pool == "$IBDEV" ]] || fail "pool device.gpustack.ai/rdma selects '$pool', want $IBDEV"
pass "fabricctl devices: $IBDEV rdma, no PCI, $uverbs=$kdev, ACTIVE Ethernet on $NETDEV, rdma_cm $cm"
