#!/bin/bash
# 09-real-kubelet (issue 10, case 8): the real kubelet v1.20.2, Debian's containerd and runc run
# INSIDE the soft-RoCE VM, with fabric-agent serving the real rxe device.
# (a) A static Pod asking for device.gpustack.ai/rdma: 1 opens the real rxe device: ibv_devinfo and
#     `fi_info -p verbs` list it from inside the container (the host's rdma-core and libfabric through
#     read-only hostPath mounts of /usr, /lib, /lib64, /etc/libibverbs.d, /etc/alternatives).
# (b) A Pod that sees /dev/infiniband through a hostPath without the request gets "Failed to open
#     device" from ibv_devinfo and `fi_getinfo: -61` from fi_info (the provider silently vanishes),
#     and `fabricctl check` there says not-granted with a non-zero exit.
# The kubelet binary comes from test/realkubelet/build-kubelet.sh's cache (the VM's root is the
# host's /); this case never builds it. It reuses test/realkubelet/lib.sh (containerd and kubelet
# configuration, OCI image archives, Pod helpers) without its private namespaces: the VM is
# disposable. VM facts: shared/reference/real-kubelet.md (cgroup v1, tmpfs under containerd).
# Runs after the runc cases: it remounts /sys/fs/cgroup as cgroup v1 (kubelet 1.20 + cgroupfs), /run
# and /var/lib (lib/rk-vm.sh, shared with 10-observe).
# e2e: needs the real kubelet
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
# shellcheck source=../lib/rk-vm.sh
source "$E2E_LIB/rk-vm.sh"
rkvm_check_parts
read -r uverbs _ < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"

# ---- the node (the VM itself), containerd, the kubelet and the agent: lib/rk-vm.sh ---------------
rkvm_node /run/rk
rkvm_start

# ---- the two Pods ---------------------------------------------------------------------------------
rkvm_pod e2e-granted "      resources: {limits: {$RES: 1}}" 0 | run_static_pod e2e-granted
rkvm_pod e2e-hostpath "" 1 | run_static_pod e2e-hostpath
wait_container_running e2e-granted c 90 2>>"$OUT/setup.log" ||
  fail "granted Pod not running: $(pod_json e2e-granted | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
wait_container_running e2e-hostpath c 60 2>>"$OUT/setup.log" ||
  fail "hostPath Pod not running: $(pod_json e2e-hostpath | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
log "both Pods running at $(since)s"
log "kubelet checkpoint: $(checkpoint | jq -c '.Data.PodDeviceEntries' 2>/dev/null)"

# One exec per Pod (each ctr exec costs seconds under TCG): sections "== NAME", each command's
# output followed by "EXIT=<code>".
probe() {  # POD FI_INFO_ARGS
  pod_exec "$1" c /bin/sh -c "
    echo '== ls'; ls /dev/infiniband 2>&1; echo EXIT=\$?
    echo '== ibv_devinfo'; ibv_devinfo -d $IBDEV 2>&1; echo EXIT=\$?
    echo '== fi_info'; fi_info -p verbs $2 2>&1; echo EXIT=\$?
    echo '== check-json'; $FABRICCTL check -o json 2>/dev/null; echo EXIT=\$?
    echo '== check'; $FABRICCTL check 2>&1; echo EXIT=\$?" 2>&1
}
section() { awk -v s="== $2" '$0 == s { f = 1; next } /^== / { f = 0 } f' <<<"$1"; }
body() { section "$1" "$2" | grep -v '^EXIT='; }
exit_of() { section "$1" "$2" | sed -n 's/^EXIT=//p' | tail -1; }

# (a) granted
g=$(probe e2e-granted "-t FI_EP_RDM"); echo "==== granted Pod"; echo "$g"
body "$g" ls | grep -qx "$uverbs" || fail "granted Pod has no /dev/infiniband/$uverbs: $(body "$g" ls | tr '\n' ' ')"
g_ibv=$(body "$g" ibv_devinfo)
grep -qE "hca_id:[[:space:]]+$IBDEV" <<<"$g_ibv" && grep -q PORT_ACTIVE <<<"$g_ibv" ||
  fail "ibv_devinfo in the granted Pod does not show $IBDEV PORT_ACTIVE: $(head -n 3 <<<"$g_ibv" | tr '\n' ' ')"
body "$g" fi_info | grep -qE "domain: +$IBDEV\b" ||
  fail "fi_info -p verbs in the granted Pod does not list $IBDEV: $(body "$g" fi_info | head -n 3 | tr '\n' ' ')"
g_v=$(body "$g" check-json | jq -r '.verdict // empty' 2>/dev/null) g_rc=$(exit_of "$g" check-json)
[[ -n $g_v && $g_v != not-granted ]] ||
  fail "fabricctl check in the granted Pod: verdict '$g_v', want anything but not-granted"
body "$g" check-json | jq -e '[.findings[]?.verdict] | index("not-granted") == null' >/dev/null ||
  fail "fabricctl check in the granted Pod has a not-granted finding"

# (b) hostPath, no request
h=$(probe e2e-hostpath ""); echo "==== hostPath Pod"; echo "$h"
body "$h" ls | grep -qx "$uverbs" || fail "hostPath Pod does not see /dev/infiniband/$uverbs: $(body "$h" ls | tr '\n' ' ')"
body "$h" ibv_devinfo | grep -q "Failed to open device" ||
  fail "ibv_devinfo in the hostPath Pod: want 'Failed to open device', got: $(body "$h" ibv_devinfo | head -n 3 | tr '\n' ' ')"
body "$h" fi_info | grep -q "fi_getinfo: -61" ||
  fail "fi_info -p verbs in the hostPath Pod: want 'fi_getinfo: -61', got: $(body "$h" fi_info | head -n 3 | tr '\n' ' ')"
h_v=$(body "$h" check-json | jq -r '.verdict // empty' 2>/dev/null) h_rc=$(exit_of "$h" check-json)
[[ $h_v == not-granted ]] || fail "fabricctl check in the hostPath Pod: verdict '$h_v', want not-granted"
[[ -n $h_rc && $h_rc != 0 ]] || fail "fabricctl check in the hostPath Pod says not-granted but exits '$h_rc'"
body "$h" check | grep -q not-granted || fail "fabricctl check's text output in the hostPath Pod does not say not-granted"

pass "kubelet $KUBELET_VERSION up in ${t_kubelet}s; granted Pod: ibv_devinfo $IBDEV PORT_ACTIVE, fi_info verbs lists $IBDEV, check '$g_v' (exit $g_rc); hostPath Pod: 'Failed to open device', fi_getinfo -61, check not-granted (exit $h_rc); $(since)s"
