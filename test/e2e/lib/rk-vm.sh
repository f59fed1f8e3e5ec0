# shellcheck shell=bash disable=SC2034  # variables are for the sourcing case
# The real kubelet v1.20.2, Debian's containerd 1.6 and runc on the VM itself (no private
# namespaces: the VM is disposable), for the cases that need them (09-real-kubelet, 10-observe).
# Source it after case-lib.sh, then:
#   rkvm_node WORK           tmpfs on WORK and /run/containerd, binaries copied there, cgroup v1
#                            (kubelet 1.20 + cgroupfs), /var/lib and /var/log, sysctls, a default route.
#                            Safe when an earlier case of the same boot did it already.
#   rkvm_start [AGENT_FLAG...]  containerd, the images, the kubelet, the agent (started once
#                            kubelet.sock exists; the flags are added to 09's), waits until
#                            device.gpustack.ai/rdma is registered and the images are imported.
#   rkvm_pod NAME LIMITS_YAML IB(0|1) [HOSTNET=true] [CMD]
#                            a busybox Pod manifest with the host's /usr, /lib, /lib64,
#                            /etc/libibverbs.d, /etc/alternatives, fabricctl's folder and the e2e
#                            tools' ($E2E_TOOLS_DIR, when built) as read-only hostPaths (and
#                            /dev/infiniband when IB=1).
# Env: RK_CNI_CONFLIST (a file: containerd's CNI network; without it only hostNetwork Pods start),
#   RKVM_METRICS (the agent's --metrics-address, default 127.0.0.1:0),
#   RKVM_AGENT_PREFIX (an array: a command the agent runs under, e.g. setpriv dropping capabilities),
#   RKVM_APISERVER=1 (issue 25): the kubelet registers as Node e2e-node with the real control plane
#   (etcd + kube-apiserver v1.20.2, test/realkubelet/kube-api.sh) that run.sh starts ON THE HOST for a
#   case with a "# e2e: needs the API server" line (lib/host-api.sh; the VM dials it at 10.0.2.2).
#   Every function of kube-api.sh then works in the case (api, api_create_pod, sa_token,
#   patch_condition, wait_api_condition, describe_pod...). Pods bound to e2e-node are deleted when a
#   case starts and ends, so the next case's kubelet does not run them.
# At exit the logs are copied to $OUT and every process the case's kubelet started (Pods, shims)
# is killed, so a later case starts from empty cgroups.
# Facts behind each step: /work/shared/reference/real-kubelet.md and test/e2e/README.md.
IMAGES=$E2E_OUTDIR/rk-images  # written by run.sh on the host: pause.tar, busybox.tar, kubelet-path
RK_KUBELET=$(cat "$IMAGES/kubelet-path" 2>/dev/null)
RK_KUBELET=${RK_KUBELET:-/var/cache/fabric-test/kubelet/kubelet-v1.20.2}
RES=device.gpustack.ai/rdma
t_start=$(date +%s.%N)
since() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# rkvm_check_parts: skip (or fail) the case when a part cannot be had.
rkvm_check_parts() {
  local t
  need_exe "$AGENT"
  need_exe "$FABRICCTL"
  [[ -x $RK_KUBELET ]] ||
    skip "no cached kubelet at $RK_KUBELET (build it with test/realkubelet/build-kubelet.sh)"
  for t in containerd containerd-shim-runc-v2 ctr runc curl ibv_devinfo fi_info; do
    command -v "$t" >/dev/null || skip "$t not installed"
  done
  [[ -s $IMAGES/pause.tar && -s $IMAGES/busybox.tar ]] ||
    fail "no Pod images in $IMAGES (run.sh builds them on the host with lib/rk-images.sh)"
  if [[ ${RKVM_APISERVER:-0} == 1 && ! -s $E2E_OUTDIR/api/vm/env ]]; then
    skip "no control plane: $(cat "$E2E_OUTDIR/api/why" 2>/dev/null || echo "the case lacks '# e2e: needs the API server'")"
  fi
}

rkvm_node() {  # WORK
  local work=$1 c h t
  # shellcheck source=../../realkubelet/lib.sh
  source "$E2E_SRC_DIR/test/realkubelet/lib.sh"
  # The work dir is a tmpfs: containerd's overlay snapshots cannot sit on the VM's overlay root. So
  # is containerd's state dir (the host's /run shows through the VM's overlay). A fresh tmpfs per
  # case hides what an earlier case left.
  mkdir -p "$work" /run/containerd
  mount -t tmpfs -o mode=755 e2e-rk "$work" && mount -t tmpfs -o mode=755 e2e-containerd /run/containerd ||
    fail "tmpfs on $work, /run/containerd"
  RK_NODE_IP=$E2E_IP
  RK_KUBELET_V=2
  rk_init "$work" e2e-node
  # Binaries run from the tmpfs: demand-paging a 100 MB kubelet over 9p under TCG takes ~25 s, one
  # sequential copy a few. containerd finds its shim, and the shim runc, through PATH; ctr runs for
  # every import and exec. The kubelet and the agent are copied while the node is prepared.
  mkdir -p "$RK_WORK/bin"
  cp "$(command -v containerd)" "$(command -v containerd-shim-runc-v2)" "$(command -v runc)" \
    "$(command -v ctr)" "$RK_WORK/bin/" || fail "cannot copy containerd, its shim, runc and ctr into the VM's tmpfs"
  export PATH=$RK_WORK/bin:$PATH
  { cp "$RK_KUBELET" "$RK_WORK/bin/kubelet" && cp "$AGENT" "$RK_WORK/bin/fabric-agent" && echo ok; } \
    >"$RK_WORK/copy.out" 2>&1 &
  RKVM_COPY_PID=$!
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
  trap _rkvm_exit EXIT
  log "tmpfs and binaries ready at $(since)s"

  # cgroup v1 hierarchies (kubelet 1.20 with cgroupfs). in-vm.sh mounted cgroup v2 for the runc
  # cases: give its controllers back first, then mount a v1 tree. An earlier case of this boot
  # may have done it already.
  if [[ -d /sys/fs/cgroup/devices && $(stat -fc %T /sys/fs/cgroup/devices) == cgroupfs ]]; then
    log "cgroup v1 already mounted (an earlier case)"
  else
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
  fi

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
}

# Kills what this case's kubelet started: the Pods' processes (by cgroup) and containerd's shims
# (they leave containerd's process group on purpose; ours name our socket). A later case of the
# same boot then finds no stray Pod processes.
rkvm_kill_pods() {
  local d p
  [[ -n ${RK_CGROOT:-} && -d /sys/fs/cgroup/pids/$RK_CGROOT ]] || return 0
  for d in $(find "/sys/fs/cgroup/pids/$RK_CGROOT" -name cgroup.procs 2>/dev/null); do
    for p in $(cat "$d"); do kill -KILL "$p" 2>/dev/null; done
  done
  for p in /proc/[0-9]*; do
    [[ $(tr '\0' ' ' 2>/dev/null <"$p/cmdline") == *containerd-shim-runc-v2*"-address $RK_SOCK "* ]] &&
      kill -KILL "${p#/proc/}" 2>/dev/null
  done
  return 0
}

_rkvm_exit() {
  cp "$RK_WORK_LOGS"/*.log "$OUT/" 2>/dev/null
  [[ -n ${RK_REGISTERED:-} ]] && api_force_delete_node_pods 2>/dev/null
  _cleanup
  rkvm_kill_pods
  rkvm_release_mounts
}

# Gives the case's tmpfs memory back (binaries, images, snapshots: ~250 MB a case). Kept mounted,
# four kubelet cases of one boot outgrew the VM's RAM and the OOM killer ended case 11. Lazy, so
# the overlay snapshots below go with them; the binds onto files of the tmpfs go first.
rkvm_release_mounts() {
  local m
  for m in /proc/sys/vm/overcommit_memory /proc/sys/kernel/panic /var/log /var/lib/kubelet /var/lib \
           /run/containerd "${RK_WORK:-}"; do
    [[ -n $m ]] && mountpoint -q "$m" && umount -l "$m" 2>/dev/null
  done
  return 0
}

rkvm_start() {  # [AGENT_FLAG...]
  start_containerd >>"$OUT/setup.log" 2>&1 || fail "containerd did not start: $(tail -n 3 "$RK_WORK/containerd.log" | tr '\n' ' ')"
  log "containerd up at $(since)s"
  # Imports run while the kubelet starts (it needs the pause image only for the first Pod).
  { import_image "$IMAGES/pause.tar" && import_image "$IMAGES/busybox.tar" && echo ok; } >"$RK_WORK/import.out" 2>&1 &
  local import_pid=$!
  wait "$RKVM_COPY_PID"
  grep -qx ok "$RK_WORK/copy.out" || fail "cannot copy the kubelet and the agent into the VM's tmpfs: $(cat "$RK_WORK/copy.out")"
  KUBELET_VERSION=$("$RK_WORK/bin/kubelet" --version 2>/dev/null | cut -d' ' -f2)
  RK_KUBELET=$RK_WORK/bin/kubelet
  # The agent starts once the kubelet serves kubelet.sock (the kubelet clears device-plugins/ before),
  # while the kubelet finishes its start.
  KSOCK=/var/lib/kubelet/device-plugins/kubelet.sock
  if [[ ${RKVM_APISERVER:-0} == 1 ]]; then
    # shellcheck disable=SC1091
    source "$E2E_OUTDIR/api/vm/env"
    [[ $(api_code GET /readyz) == 200 ]] || fail "the host's kube-apiserver does not answer at $RK_API"
    RK_REGISTERED=1
    api_force_delete_node_pods  # an earlier case's Pods must not start on this kubelet
  fi
  touch "$RK_WORK/agent.started"
  start_bg agent sh -c 'while [ ! -S "$1" ]; do sleep 0.1; done; shift; exec "$@"' agent "$KSOCK" \
    "${RKVM_AGENT_PREFIX[@]}" "$RK_WORK/bin/fabric-agent" --sysfs-root /sys --dev-root /dev --kubelet-root /var/lib/kubelet \
    --registration kubelet --metrics-address "${RKVM_METRICS:-127.0.0.1:0}" --state-dir "$RK_WORK/agent-state" \
    --cdi-dir "$RK_WORK/cdi" --agent-socket "$RK_WORK/agent.sock" --memlock-hook-path "" "$@"
  AGENT_PID=$BG_PID
  start_kubelet >>"$OUT/setup.log" 2>&1 || fail "kubelet did not start: $(tail -n 3 "$(kubelet_log)" | tr '\n' ' ')"
  t_kubelet=$(since)
  log "kubelet $KUBELET_VERSION up at ${t_kubelet}s"
  if [[ -n ${RK_REGISTERED:-} ]]; then
    wait_for 60 test "$(api_code GET "/api/v1/nodes/$RK_NODE")" == 200 || fail "the kubelet did not register Node $RK_NODE"
    log "Node $RK_NODE registered at $(since)s"
  fi
  wait_for 60 grep -q "Got registration request from device plugin with resource name \"$RES\"" \
    "$(kubelet_log)" || fail "the agent did not register $RES with the kubelet"
  # Admission needs the device list (ListAndWatch), which the kubelet checkpoints.
  wait_for 30 _rkvm_registered || fail "the kubelet's checkpoint lists no $RES device after registration"
  log "$RES registered at $(since)s: $(checkpoint | jq -c --arg r "$RES" '.Data.RegisteredDevices[$r]')"
  wait "$import_pid"
  grep -qx ok "$RK_WORK/import.out" || fail "image import failed: $(tr '\n' ' ' <"$RK_WORK/import.out")"
  log "images imported: $(ctr_k8s images ls -q | tr '\n' ' ')"
  # fabricctl from the build dir (its shared libraries come with the /usr and /lib hostPaths).
  FABRICCTL_DIR=$(dirname "$(realpath "$FABRICCTL")")
  FABRICCTL=$FABRICCTL_DIR/fabricctl
  E2E_TOOLS_DIR=$(realpath "$BUILD/test/e2e/tools" 2>/dev/null)
}

checkpoint() { cat "$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint" 2>/dev/null; }
_rkvm_registered() {
  checkpoint | jq -e --arg r "$RES" '(.Data.RegisteredDevices[$r] // []) | length > 0' >/dev/null 2>&1
}
# The device IDs the kubelet's checkpoint holds for Pod NAME (one resource or all). DeviceIDs is a
# NUMA-node -> list map in v1.20.
pod_device_ids() {  # NAME [RESOURCE]
  local uid
  uid=$(pod_uid "$1")
  [[ -n $uid ]] || return 1
  checkpoint | jq -r --arg u "$uid" --arg r "${2:-}" \
    '.Data.PodDeviceEntries[]? | select(.PodUID == $u) | select($r == "" or .ResourceName == $r) |
     .DeviceIDs | if type == "object" then [.[][]] else . end | .[]' | sort
}

rkvm_pod() {  # NAME LIMITS_YAML IB(0|1) [HOSTNET] [CMD]
  local name=$1 limits=$2 ib=$3 hostnet=${4:-true} cmd=${5:-sleep 100000} m
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: default}
spec:
  hostNetwork: $hostnet
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", $(jq -cn --arg c "$cmd" '$c')]
$limits
      volumeMounts:
EOF
  for m in usr lib lib64 etc/libibverbs.d etc/alternatives; do
    echo "        - {name: ${m//[\/.]/-}, mountPath: /$m, readOnly: true}"
  done
  echo "        - {name: fabricctl, mountPath: $FABRICCTL_DIR, readOnly: true}"
  [[ -d $E2E_TOOLS_DIR ]] && echo "        - {name: e2e-tools, mountPath: $E2E_TOOLS_DIR, readOnly: true}"
  ((ib)) && echo "        - {name: ib, mountPath: /dev/infiniband}"
  echo "  volumes:"
  for m in usr lib lib64 etc/libibverbs.d etc/alternatives; do
    echo "    - {name: ${m//[\/.]/-}, hostPath: {path: /$m}}"
  done
  echo "    - {name: fabricctl, hostPath: {path: $FABRICCTL_DIR, type: Directory}}"
  [[ -d $E2E_TOOLS_DIR ]] && echo "    - {name: e2e-tools, hostPath: {path: $E2E_TOOLS_DIR, type: Directory}}"
  ((ib)) && echo "    - {name: ib, hostPath: {path: /dev/infiniband, type: Directory}}"
  return 0
}
