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
# Runs last: it remounts /sys/fs/cgroup as cgroup v1 (kubelet 1.20 + cgroupfs), /run and /var/lib.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
IMAGES=$E2E_OUTDIR/rk-images  # written by run.sh on the host: pause.tar, busybox.tar, kubelet-path
RK_KUBELET=$(cat "$IMAGES/kubelet-path" 2>/dev/null)
RK_KUBELET=${RK_KUBELET:-/var/cache/fabric-test/kubelet/kubelet-v1.20.2}
RES=device.gpustack.ai/rdma
need_exe "$AGENT"
need_exe "$FABRICCTL"
[[ -x $RK_KUBELET ]] ||
  skip "no cached kubelet at $RK_KUBELET (build it with test/realkubelet/build-kubelet.sh)"
for t in containerd containerd-shim-runc-v2 ctr runc curl ibv_devinfo fi_info; do
  command -v "$t" >/dev/null || skip "$t not installed"
done
[[ -s $IMAGES/pause.tar && -s $IMAGES/busybox.tar ]] ||
  fail "no Pod images in $IMAGES (run.sh builds them on the host with lib/rk-images.sh)"
read -r uverbs _ < <(ibdev_uverbs "$IBDEV") || fail "no uverbs for $IBDEV"
t_start=$(date +%s.%N)
since() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# ---- the node: the VM itself (no private namespaces) -------------------------------------------
# shellcheck source=../../realkubelet/lib.sh
source "$E2E_SRC_DIR/test/realkubelet/lib.sh"
# The work dir is a tmpfs: containerd's overlay snapshots cannot sit on the VM's overlay root. So is
# containerd's state dir (the host's /run shows through the VM's overlay).
mkdir -p /run/rk /run/containerd
mount -t tmpfs -o mode=755 e2e-rk /run/rk && mount -t tmpfs -o mode=755 e2e-containerd /run/containerd ||
  fail "tmpfs on /run/rk, /run/containerd"
RK_NODE_IP=$E2E_IP
RK_KUBELET_V=2
rk_init /run/rk e2e-node
# Binaries run from the tmpfs: demand-paging a 100 MB kubelet over 9p under TCG takes ~25 s, one
# sequential copy a few. containerd finds its shim, and the shim runc, through PATH; ctr runs for
# every import and exec. The kubelet and the agent are copied while the node is prepared.
mkdir -p "$RK_WORK/bin"
cp "$(command -v containerd)" "$(command -v containerd-shim-runc-v2)" "$(command -v runc)" \
  "$(command -v ctr)" "$RK_WORK/bin/" || fail "cannot copy containerd, its shim, runc and ctr into the VM's tmpfs"
export PATH=$RK_WORK/bin:$PATH
{ cp "$RK_KUBELET" "$RK_WORK/bin/kubelet" && cp "$AGENT" "$RK_WORK/bin/fabric-agent" && echo ok; } \
  >"$RK_WORK/copy.out" 2>&1 &
copy_pid=$!
RK_WORK_LOGS=$RK_WORK
in_ns() { "$@"; }
rk_holder_pid() { echo 1; }
# The kubelet's PATH lacks systemd-run: probing it without systemd costs ~6 s under TCG.
KBIN=$RK_WORK/kbin
mkdir -p "$KBIN"
for t in mount umount nsenter findmnt du find nice ionice losetup; do
  command -v "$t" >/dev/null && ln -sf "$(command -v "$t")" "$KBIN/$t"
done
ns_spawn() {  # NAME LOG CMD... (remembered for case-lib's cleanup)
  local name=$1 lg=$2; shift 2
  [[ $name == kubelet ]] && set -- env PATH="$RK_WORK/bin:$KBIN:/usr/sbin:/sbin" "$@"
  "$@" >>"$lg" 2>&1 </dev/null &
  echo $! >"$RK_WORK/pids/$name"
  _bg_pids+=("$!")
}
_case_exit() {
  cp "$RK_WORK_LOGS"/*.log "$OUT/" 2>/dev/null
  _cleanup
}
trap _case_exit EXIT

log "tmpfs and binaries ready at $(since)s"
# cgroup v1 hierarchies (kubelet 1.20 with cgroupfs). in-vm.sh mounted cgroup v2 for the runc
# cases: give its controllers back first, then mount a v1 tree.
if [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]]; then
  find /sys/fs/cgroup -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
  for c in $(cat /sys/fs/cgroup/cgroup.subtree_control); do
    echo "-$c" >/sys/fs/cgroup/cgroup.subtree_control
  done
  log "cgroup v2: $(tr '\n' ' ' </sys/fs/cgroup/cgroup.stat)"
  umount /sys/fs/cgroup || fail "cannot unmount the cgroup v2 tree"
fi
mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup || fail "tmpfs on /sys/fs/cgroup"
# A controller stays bound to cgroup v2 while a removed cgroup of the runc cases is still dying
# (within a second for most; memory was bound to v1 by in-vm.sh from the start, as a dying memory
# cgroup lingers while page cache is charged to it, and this mount reuses that hierarchy).
for h in cpu,cpuacct memory devices pids cpuset freezer blkio hugetlb net_cls,net_prio perf_event; do
  mkdir -p "/sys/fs/cgroup/$h"
  wait_for 10 mount -t cgroup -o "$h" cgroup "/sys/fs/cgroup/$h" 2>/dev/null ||
    fail "cannot mount the cgroup v1 $h hierarchy: $(mount -t cgroup -o "$h" cgroup "/sys/fs/cgroup/$h" 2>&1 | head -1)"
done
ln -s cpu,cpuacct /sys/fs/cgroup/cpu && ln -s cpu,cpuacct /sys/fs/cgroup/cpuacct
ln -s net_cls,net_prio /sys/fs/cgroup/net_cls && ln -s net_cls,net_prio /sys/fs/cgroup/net_prio
mkdir -p /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd ||
  fail "cannot mount the name=systemd hierarchy"

# What lib.sh's start_ns does inside its namespace, here on the VM itself.
mount -t tmpfs -o mode=755 e2e-varlib /var/lib || fail "tmpfs on /var/lib"
mkdir -p /var/lib/kubelet && mount --bind "$RK_KUBELET_DIR" /var/lib/kubelet
mount --bind "$RK_LOGDIR" /var/log
log "cgroup v1 and mounts ready at $(since)s"
# protectKernelDefaults: the kubelet only checks these; the files keep the VM's own settings.
mount --bind "$RK_WORK/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
mount --bind "$RK_WORK/sysctl/panic" /proc/sys/kernel/panic
mount --bind "$RK_WORK/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
# The kubelet wants a default route; one into a veth pair keeps every packet inside the VM.
if [[ -z $(ip route show default) ]]; then
  modprobe veth && ip link add e2e-node0 type veth peer name e2e-node1 &&
    ip link set e2e-node0 up && ip link set e2e-node1 up && ip route add default dev e2e-node0 ||
    fail "cannot add a default route"
fi
log "node prepared at $(since)s"

# ---- containerd, images (pause, busybox: built on the host by lib/rk-images.sh), kubelet ----------
start_containerd >>"$OUT/setup.log" 2>&1 || fail "containerd did not start: $(tail -n 3 "$RK_WORK/containerd.log" | tr '\n' ' ')"
log "containerd up at $(since)s"
# Imports run while the kubelet starts (it needs the pause image only for the first Pod).
{ import_image "$IMAGES/pause.tar" && import_image "$IMAGES/busybox.tar" && echo ok; } >"$RK_WORK/import.out" 2>&1 &
import_pid=$!
wait "$copy_pid"
grep -qx ok "$RK_WORK/copy.out" || fail "cannot copy the kubelet and the agent into the VM's tmpfs: $(cat "$RK_WORK/copy.out")"
KUBELET_VERSION=$("$RK_WORK/bin/kubelet" --version 2>/dev/null | cut -d' ' -f2)
RK_KUBELET=$RK_WORK/bin/kubelet
# The agent starts once the kubelet serves kubelet.sock (the kubelet clears device-plugins/ before),
# while the kubelet finishes its start.
KSOCK=/var/lib/kubelet/device-plugins/kubelet.sock
start_bg agent sh -c 'while [ ! -S "$1" ]; do sleep 0.1; done; shift; exec "$@"' agent "$KSOCK" \
  "$RK_WORK/bin/fabric-agent" --sysfs-root /sys --dev-root /dev --kubelet-root /var/lib/kubelet \
  --registration kubelet --metrics-address 127.0.0.1:0 --state-dir "$RK_WORK/agent-state" \
  --cdi-dir "$RK_WORK/cdi" --agent-socket "$RK_WORK/agent.sock" --memlock-hook-path ""
start_kubelet >>"$OUT/setup.log" 2>&1 || fail "kubelet did not start: $(tail -n 3 "$(kubelet_log)" | tr '\n' ' ')"
t_kubelet=$(since)
log "kubelet $KUBELET_VERSION up at ${t_kubelet}s"
wait_for 60 grep -q "Got registration request from device plugin with resource name \"$RES\"" \
  "$(kubelet_log)" || fail "the agent did not register $RES with the kubelet"
# Admission needs the device list (ListAndWatch), which the kubelet checkpoints.
checkpoint() { cat "$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint" 2>/dev/null; }
registered() { checkpoint | jq -e --arg r "$RES" '(.Data.RegisteredDevices[$r] // []) | length > 0' >/dev/null 2>&1; }
wait_for 30 registered || fail "the kubelet's checkpoint lists no $RES device after registration"
log "$RES registered at $(since)s: $(checkpoint | jq -c --arg r "$RES" '.Data.RegisteredDevices[$r]')"
wait "$import_pid"
grep -qx ok "$RK_WORK/import.out" || fail "image import failed: $(tr '\n' ' ' <"$RK_WORK/import.out")"
log "images imported: $(ctr_k8s images ls -q | tr '\n' ' ')"

# ---- the two Pods ---------------------------------------------------------------------------------
# fabricctl from the build dir (its shared libraries come with the /usr and /lib hostPaths).
FABRICCTL_DIR=$(dirname "$(realpath "$FABRICCTL")")
FABRICCTL=$FABRICCTL_DIR/fabricctl
mkpod() {  # NAME LIMITS_YAML EXTRA_MOUNT(0|1)
  local name=$1 limits=$2 ib=$3 m
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: default}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "sleep 100000"]
$limits
      volumeMounts:
EOF
  for m in usr lib lib64 etc/libibverbs.d etc/alternatives; do
    echo "        - {name: ${m//[\/.]/-}, mountPath: /$m, readOnly: true}"
  done
  echo "        - {name: fabricctl, mountPath: $FABRICCTL_DIR, readOnly: true}"
  ((ib)) && echo "        - {name: ib, mountPath: /dev/infiniband}"
  echo "  volumes:"
  for m in usr lib lib64 etc/libibverbs.d etc/alternatives; do
    echo "    - {name: ${m//[\/.]/-}, hostPath: {path: /$m}}"
  done
  echo "    - {name: fabricctl, hostPath: {path: $FABRICCTL_DIR, type: Directory}}"
  ((ib)) && echo "    - {name: ib, hostPath: {path: /dev/infiniband, type: Directory}}"
  return 0
}
mkpod e2e-granted "      resources: {limits: {$RES: 1}}" 0 | run_static_pod e2e-granted
mkpod e2e-hostpath "" 1 | run_static_pod e2e-hostpath
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
