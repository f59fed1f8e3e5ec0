# shellcheck shell=bash
# test/realkubelet/lib.sh: a real, standalone kubelet (no API server, static Pods) with containerd and
# runc, all inside a private mount + network namespace, so nothing on the host changes. Source it.
# Recipe and the facts behind each step: /work/shared/reference/real-kubelet.md (also issue 10).
#
#   rk_init WORK [NODE]      lay out WORK (keep it short: unix socket paths < 108 chars); sets
#                            RK_WORK RK_NODE RK_KUBELET_DIR (bind-mounted on /var/lib/kubelet)
#                            RK_MANIFESTS RK_LOGDIR RK_SOCK (containerd) RK_CGROOT.
#                            Env: RK_KUBELET (binary; default build-kubelet.sh's cache),
#                            RK_DEV_IB (folder bind-mounted over /dev/infiniband, optional),
#                            RK_CNI_CONFLIST (file: containerd's CNI config; empty: hostNetwork only),
#                            RK_CNI_BIN_EXTRA (files added to the CNI bin dir, e.g. fabric-cni),
#                            RK_NODE_IP (the node's address inside the namespace, 10.98.0.1),
#                            RK_KUBELET_V (kubelet --v, default 4: GetPreferredAllocation is logged at 4),
#                            RK_KUBELET_ROOT (the kubelet's --root-dir, default /var/lib/kubelet; its
#                            device-plugins/ stays in /var/lib/kubelet = RK_KUBELET_DIR whatever it is).
#   rk_check_parts           print one reason and return 1 when a part cannot be had.
#   start_cluster / stop_cluster   namespace holder + containerd + kubelet / everything, cgroups too.
#   start_containerd / stop_containerd, start_kubelet / stop_kubelet / restart_kubelet
#   in_ns CMD...             run CMD in the cluster's mount + network namespace ("the node").
#   ns_spawn NAME LOG CMD... start a background process in the namespace, pid in WORK/pids/NAME;
#   ns_stop NAME             stop it (SIGTERM, then SIGKILL after 10 s).
#   ctr_k8s ARGS...          ctr -n k8s.io against our containerd.
#   build_oci_image REF ROOTFS OUT [ENTRYPOINT...]   write an OCI image archive (one layer).
#   build_pause_image OUT    registry.k8s.io/pause:3.6 from a tiny static C program.
#   build_busybox_image OUT [REF] [SRC[:DEST]...]  busybox-static + applet links + binaries at DEST
#                            (default: the same path) with their shared libraries (from ldd).
#                            REF default docker.io/local/busybox:rk. Entrypoint /bin/sh, or
#                            RK_IMAGE_ENTRYPOINT (e.g. the agent, for the chart's args).
#   import_image ARCHIVE     ctr -n k8s.io images import.
#   run_static_pod NAME      copy stdin (a Pod manifest) into the static Pod folder as NAME.yaml.
#   delete_static_pod NAME   remove it, wait until its containers are gone, remove them from containerd.
#   pod_json NAME            the kubelet's view of Pod NAME (static Pods are NAME-NODE) from :10250/pods.
#   pod_phase NAME / pod_uid NAME / container_id NAME CONTAINER
#   wait_pod NAME PHASE [TIMEOUT_S]          wait until the phase is PHASE (Running, Failed...).
#   wait_container_running NAME CONTAINER [TIMEOUT_S]  (gives up early when the Pod Failed)
#   wait_log NAME CONTAINER REGEX [TIMEOUT_S] wait until the container's log matches.
#   pod_logs NAME [CONTAINER] the container's log lines (CRI prefix stripped).
#   pod_exec NAME CONTAINER CMD...           run CMD in the container (ctr task exec).
#   container_cgroup_devices NAME CONTAINER  the container's devices.list (device cgroup v1).
#   kubelet_log              path of the current kubelet log (each start gets a new one).
#   checkpoint-free helpers for the kubelet's view: rk_kubelet_pods (GET :10250/pods).
#   make_dev_nodes SYSFS OUT mknod OUT/<name> for every uverbs/umad/issm/rdma_cm of a fake sysfs tree,
#                            with the tree's major:minor (real char devices: ENXIO when granted).
# Requires root, unshare/nsenter, containerd, ctr, runc, curl, jq, gcc (static libc), busybox-static.
#
# A control plane (kube-api.sh, sourced below; issue 25): with RK_CONTROL_PLANE=1, start_cluster also
# starts etcd and kube-apiserver before the kubelet, and the kubelet registers as Node $RK_NODE through
# a kubeconfig (static Pods then also show up as mirror Pods). The Pod helpers above (pod_json,
# pod_exec, wait_container_running, pod_logs...) find Pods created through the API by their own name.
# Before each Pod is created, run_static_pod and api_create_pod wait until the kubelet reports the
# capacity of every resource it asks for (wait_capacity, in kube-api.sh).

RK_HERE=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=kube-api.sh
source "$RK_HERE/kube-api.sh"

rk_log() { echo "[rk $(date +%H:%M:%S)] $*" >&2; }

rk_init() {
  RK_WORK=$(realpath -m "$1")
  RK_NODE=${2:-rk-node}
  RK_NODE_IP=${RK_NODE_IP:-10.98.0.1}
  RK_KUBELET_DIR=$RK_WORK/kubelet
  RK_MANIFESTS=$RK_WORK/manifests
  RK_LOGDIR=$RK_WORK/log
  RK_SOCK=$RK_WORK/c.sock
  RK_CGROOT=${RK_CGROOT:-fabric-rk-$(basename "$RK_WORK")}
  RK_KUBELET=${RK_KUBELET:-${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet/kubelet-v1.20.2}
  mkdir -p "$RK_WORK"/{kubelet,manifests,log,pids,containerd/root,containerd/opt,cni/bin,cni/net.d,sysctl,images}
  echo 1 >"$RK_WORK/sysctl/overcommit_memory"
  echo 10 >"$RK_WORK/sysctl/panic"
  echo 1 >"$RK_WORK/sysctl/panic_on_oops"
}

rk_check_parts() {
  local t
  [[ $(id -u) == 0 ]] || { echo "needs root (namespaces, cgroups, mknod)"; return 1; }
  for t in unshare nsenter containerd ctr runc curl jq gcc ip; do
    command -v "$t" >/dev/null || { echo "$t not installed"; return 1; }
  done
  [[ -x /bin/busybox ]] || { echo "busybox-static not installed"; return 1; }
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
    { echo "containernetworking-plugins not installed"; return 1; }
  [[ -d /sys/fs/cgroup/devices ]] || { echo "no cgroup v1 devices hierarchy (kubelet 1.20 + cgroupfs)"; return 1; }
  [[ -x $RK_KUBELET ]] || { echo "no kubelet binary at $RK_KUBELET"; return 1; }
  unshare -m -n true 2>/dev/null || { echo "cannot create mount/network namespaces"; return 1; }
  return 0
}

# ---- the namespace ("the node") ------------------------------------------------------------------
rk_holder_pid() { cat "$RK_WORK/pids/holder" 2>/dev/null; }

in_ns() { nsenter -t "$(rk_holder_pid)" -m -n -- "$@"; }

ns_spawn() {  # NAME LOG CMD...
  local name=$1 log=$2; shift 2
  nsenter -t "$(rk_holder_pid)" -m -n -- "$@" >>"$log" 2>&1 </dev/null &
  echo $! >"$RK_WORK/pids/$name"
}

ns_pid_alive() { local p; p=$(cat "$RK_WORK/pids/$1" 2>/dev/null) && kill -0 "$p" 2>/dev/null; }

ns_stop() {  # NAME [SIGNAL]
  local p i
  p=$(cat "$RK_WORK/pids/$1" 2>/dev/null) || return 0
  kill "-${2:-TERM}" "$p" 2>/dev/null
  for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  rm -f "$RK_WORK/pids/$1"
}

rk_cgroup_dirs() {  # every hierarchy's folder for our cgroup root
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -f $h/cgroup.procs ]] && echo "${h%/}/$RK_CGROOT"
  done
}

rk_make_cgroup_root() {
  local d
  for d in $(rk_cgroup_dirs); do
    mkdir -p "$d"
    if [[ -f $d/cpuset.cpus && -z $(cat "$d/cpuset.cpus") ]]; then
      cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

rk_remove_cgroups() {
  local d
  for d in $(rk_cgroup_dirs); do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  return 0
}

start_ns() {
  [[ -n $(rk_holder_pid) ]] && kill -0 "$(rk_holder_pid)" 2>/dev/null && return 0
  unshare -m -n --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! >"$RK_WORK/pids/holder"
  local i
  for ((i = 0; i < 50; i++)); do
    [[ $(readlink /proc/$!/ns/mnt) != "$(readlink /proc/self/ns/mnt)" ]] && break
    sleep 0.05
  done
  # The kubelet hard-codes /var/lib/kubelet/device-plugins; it checks (protectKernelDefaults) but
  # must not rewrite the host's sysctls; /run and /var/lib are private; /dev/infiniband optional.
  [[ -n ${RK_DEV_IB:-} && ! -e /dev/infiniband ]] && mkdir -p /dev/infiniband
  in_ns sh -ec "
    ip link set lo up
    # The node's own address (the kubelet wants a default route to find one; no dummy module here).
    ip link add rk-node0 type veth peer name rk-node1
    ip addr add $RK_NODE_IP/24 dev rk-node0
    ip link set rk-node0 up
    ip link set rk-node1 up
    ip route add default dev rk-node0
    mount -t tmpfs -o mode=755 rk-varlib /var/lib
    mkdir -p /var/lib/kubelet && mount --bind '$RK_KUBELET_DIR' /var/lib/kubelet
    mount --bind '$RK_LOGDIR' /var/log
    mount -t tmpfs -o mode=755 rk-run /run
    mount --bind '$RK_WORK/sysctl/overcommit_memory' /proc/sys/vm/overcommit_memory
    mount --bind '$RK_WORK/sysctl/panic' /proc/sys/kernel/panic
    mount --bind '$RK_WORK/sysctl/panic_on_oops' /proc/sys/kernel/panic_on_oops
    if [ -n '${RK_DEV_IB:-}' ]; then mount --bind '${RK_DEV_IB:-}' /dev/infiniband; fi
  "
}

stop_ns() {
  local p
  p=$(rk_holder_pid) || return 0
  kill "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  rm -f "$RK_WORK/pids/holder"
}

# ---- containerd ------------------------------------------------------------------------------------
rk_write_containerd_config() {
  local f
  for f in bridge host-local loopback; do cp -f "/usr/lib/cni/$f" "$RK_WORK/cni/bin/"; done
  for f in ${RK_CNI_BIN_EXTRA:-}; do cp -f "$f" "$RK_WORK/cni/bin/"; done
  rm -f "$RK_WORK"/cni/net.d/*
  [[ -n ${RK_CNI_CONFLIST:-} ]] && cp "$RK_CNI_CONFLIST" "$RK_WORK/cni/net.d/10-rk.conflist"
  cat >"$RK_WORK/containerd/config.toml" <<EOF
version = 2
root = "$RK_WORK/containerd/root"
state = "/run/containerd"
[grpc]
  address = "$RK_SOCK"
[ttrpc]
  address = "$RK_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$RK_WORK/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails ("can't get final child's PID")
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$RK_WORK/cni/bin"
    conf_dir = "$RK_WORK/cni/net.d"
    max_conf_num = 1
EOF
}

start_containerd() {
  rk_write_containerd_config
  ns_spawn containerd "$RK_WORK/containerd.log" containerd --config "$RK_WORK/containerd/config.toml"
  local i
  for ((i = 0; i < 300; i++)); do
    if [[ -S $RK_SOCK ]] && ctr --address "$RK_SOCK" plugins ls 2>/dev/null | awk '$2 == "cri" && $NF == "ok" {f = 1} END {exit !f}'; then
      return 0
    fi
    ns_pid_alive containerd || break
    sleep 0.1
  done
  rk_log "containerd did not come up (cri plugin not ok); log tail:"
  tail -n 20 "$RK_WORK/containerd.log" >&2
  return 1
}

# Inside the namespace: ctr creates its exec FIFOs under its own /run, which the shim must see.
ctr_k8s() { in_ns ctr --address "$RK_SOCK" -n k8s.io "$@"; }

rk_remove_all_containers() {  # kill and remove every task and container (leftovers make Pods fail)
  local c
  for c in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks kill -s KILL "$c" >/dev/null 2>&1; done
  for c in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks delete -f "$c" >/dev/null 2>&1; done
  for c in $(ctr_k8s containers ls -q 2>/dev/null); do
    ctr_k8s tasks delete -f "$c" >/dev/null 2>&1
    ctr_k8s containers rm "$c" >/dev/null 2>&1
  done
}

stop_containerd() {
  rk_remove_all_containers
  ns_stop containerd
  # Shims outlive containerd on purpose; ours carry our socket path in their command line.
  local p
  for p in $(pgrep -f -- "-address $RK_SOCK" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  return 0
}

# ---- kubelet -----------------------------------------------------------------------------------------
rk_write_kubelet_config() {
  cat >"$RK_WORK/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $RK_MANIFESTS
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /$RK_CGROOT
address: 127.0.0.1
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
protectKernelDefaults: true
makeIPTablesUtilChains: false
fileCheckFrequency: ${RK_FILE_CHECK:-1s}
syncFrequency: 10s
resolvConf: ""
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
# Registered: the Node's status (allocatable included) is recomputed this often (default 10s), and
# posted when it changed, so wait_capacity sees a registration within this period.
nodeStatusUpdateFrequency: ${RK_NODE_STATUS_PERIOD:-2s}
EOF
}

# Each start gets its own log; the counter lives in a file so subshells agree.
kubelet_log() { echo "$RK_WORK/kubelet-$(cat "$RK_WORK/kubelet.n" 2>/dev/null || echo 0).log"; }

start_kubelet() {
  echo $(($(cat "$RK_WORK/kubelet.n" 2>/dev/null || echo 0) + 1)) >"$RK_WORK/kubelet.n"
  rk_make_cgroup_root
  rk_write_kubelet_config
  local registered=()  # registered as a Node (kube-api.sh's control plane), else standalone
  [[ -n ${RK_REGISTERED:-} ]] && registered=(--kubeconfig="$RK_API_DIR/kubelet.kubeconfig")
  touch "$RK_WORK/kubelet.started"
  ns_spawn kubelet "$(kubelet_log)" "$RK_KUBELET" "${registered[@]}" \
    --config="$RK_WORK/kubelet-config.yaml" \
    --container-runtime=remote \
    --container-runtime-endpoint="unix://$RK_SOCK" --image-service-endpoint="unix://$RK_SOCK" \
    --root-dir="${RK_KUBELET_ROOT:-/var/lib/kubelet}" --hostname-override="$RK_NODE" --node-ip="$RK_NODE_IP" \
    --oom-score-adj=0 --v="${RK_KUBELET_V:-4}" --logtostderr=true
  local i
  for ((i = 0; i < 600; i++)); do
    if [[ -S $RK_KUBELET_DIR/device-plugins/kubelet.sock ]] &&
       in_ns curl -sf -m 2 http://127.0.0.1:10248/healthz >/dev/null 2>&1; then
      return 0
    fi
    ns_pid_alive kubelet || break
    sleep 0.1
  done
  rk_log "kubelet did not come up; log tail:"
  tail -n 30 "$(kubelet_log)" >&2
  return 1
}

stop_kubelet() { ns_stop kubelet; }

restart_kubelet() { stop_kubelet && start_kubelet; }

start_cluster() {
  rk_remove_cgroups
  start_ns && start_containerd || return 1
  if [[ ${RK_CONTROL_PLANE:-0} == 1 ]]; then start_control_plane || return 1; fi
  start_kubelet
}

stop_cluster() {
  local f
  # Let the kubelet stop the Pods (runs CNI DEL, releases devices), then clean up what is left.
  ns_pid_alive kubelet && ns_pid_alive kube-apiserver && api_delete_all_pods
  if ns_pid_alive kubelet && compgen -G "$RK_MANIFESTS/*.yaml" >/dev/null; then
    rm -f "$RK_MANIFESTS"/*.yaml
    for ((f = 0; f < 150; f++)); do
      [[ -z $(ctr_k8s tasks ls -q 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_kubelet
  for f in "$RK_WORK"/pids/*; do
    [[ -e $f ]] || continue
    case $(basename "$f") in holder | containerd | kube-apiserver | etcd) ;; *) ns_stop "$(basename "$f")" ;; esac
  done
  stop_control_plane
  stop_containerd
  stop_ns
  rk_remove_cgroups
}

# ---- images ------------------------------------------------------------------------------------------
build_oci_image() {  # REF ROOTFS OUT [ENTRYPOINT...]
  local ref=$1 rootfs=$2 out=$3; shift 3
  local t
  t=$(mktemp -d "$RK_WORK/images/oci.XXXXXX")
  mkdir -p "$t/blobs/sha256"
  tar --sort=name --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$rootfs" -cf "$t/layer.tar" .
  local diff_id layer_digest layer_size
  diff_id=$(sha256sum "$t/layer.tar" | cut -d' ' -f1)
  gzip -n -1 "$t/layer.tar"
  layer_digest=$(sha256sum "$t/layer.tar.gz" | cut -d' ' -f1)
  layer_size=$(stat -c %s "$t/layer.tar.gz")
  mv "$t/layer.tar.gz" "$t/blobs/sha256/$layer_digest"
  local entry
  entry=$(jq -cn '$ARGS.positional' --args "$@")
  jq -cn --arg d "sha256:$diff_id" --argjson e "$entry" \
    '{architecture:"amd64",os:"linux",config:{Entrypoint:(if ($e|length)>0 then $e else null end),
      Env:["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],WorkingDir:"/"},
      rootfs:{type:"layers",diff_ids:[$d]}}' >"$t/config.json"
  local cfg_digest cfg_size
  cfg_digest=$(sha256sum "$t/config.json" | cut -d' ' -f1)
  cfg_size=$(stat -c %s "$t/config.json")
  mv "$t/config.json" "$t/blobs/sha256/$cfg_digest"
  jq -cn --arg c "sha256:$cfg_digest" --argjson cs "$cfg_size" --arg l "sha256:$layer_digest" \
    --argjson ls "$layer_size" \
    '{schemaVersion:2,mediaType:"application/vnd.oci.image.manifest.v1+json",
      config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},
      layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar+gzip",digest:$l,size:$ls}]}' \
    >"$t/manifest.json"
  local m_digest m_size
  m_digest=$(sha256sum "$t/manifest.json" | cut -d' ' -f1)
  m_size=$(stat -c %s "$t/manifest.json")
  mv "$t/manifest.json" "$t/blobs/sha256/$m_digest"
  jq -cn --arg m "sha256:$m_digest" --argjson ms "$m_size" --arg ref "$ref" \
    '{schemaVersion:2,mediaType:"application/vnd.oci.image.index.v1+json",
      manifests:[{mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$m,size:$ms,
        platform:{architecture:"amd64",os:"linux"},
        annotations:{"io.containerd.image.name":$ref,"org.opencontainers.image.ref.name":($ref|sub(".*:";""))}}]}' \
    >"$t/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$t/oci-layout"
  tar -C "$t" -cf "$out" oci-layout index.json blobs
  rm -rf "$t"
}

build_pause_image() {  # OUT
  local r
  r=$(mktemp -d "$RK_WORK/images/pause.XXXXXX")
  cat >"$r.c" <<'EOF'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, quit); signal(SIGTERM, quit); signal(SIGCHLD, reap);
  for (;;) pause();
}
EOF
  gcc -Os -static -s -o "$r/pause" "$r.c" || return 1
  build_oci_image registry.k8s.io/pause:3.6 "$r" "$1" /pause
  rm -rf "$r" "$r.c"
}

build_busybox_image() {  # OUT [REF] [FILE...]
  local out=$1 ref=${2:-docker.io/local/busybox:rk}
  shift; (($#)) && shift
  local r a f l
  r=$(mktemp -d "$RK_WORK/images/bb.XXXXXX")
  mkdir -p "$r"/{bin,dev,proc,sys,tmp,etc,usr/bin}
  cp /bin/busybox "$r/bin/busybox"
  for a in sh ls cat echo sleep grep sed stat head tail wc tr cut env id mkdir test printf dd hexdump true false awk find cp mv; do
    ln -s busybox "$r/bin/$a"
  done
  local src dst
  for f in "$@"; do
    src=${f%%:*} dst=${f#*:}
    mkdir -p "$r$(dirname "$dst")"
    cp -L "$src" "$r$dst"
    for l in $(ldd "$src" 2>/dev/null | grep -oE '/[^ ]+' ); do
      [[ -e $r$l ]] && continue
      mkdir -p "$r$(dirname "$l")"
      cp -L "$l" "$r$l"
    done
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$r/etc/passwd"
  build_oci_image "$ref" "$r" "$out" "${RK_IMAGE_ENTRYPOINT:-/bin/sh}"
  rm -rf "$r"
}

import_image() { ctr_k8s images import --no-unpack=false "$1" >/dev/null; }

# ---- static Pods -------------------------------------------------------------------------------------
# A busybox Pod manifest (the image build_busybox_image imports). mkpod NAME "RES=N RES=N" [hostnet=true|false] [hostpath_ib=0|1] [CMD]
mkpod() {
  local name=$1 res=$2 hostnet=${3:-true} hostpath=${4:-0} cmd=${5:-sleep 100000}
  local limits="" r
  for r in $res; do limits+="          ${r%%=*}: ${r##*=}"$'\n'; done
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: default
spec:
  hostNetwork: $hostnet
  terminationGracePeriodSeconds: 1
  containers:
    - name: c
      image: docker.io/local/busybox:rk
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "$cmd"]
$(if [[ -n $limits ]]; then printf '      resources:\n        limits:\n%s' "$limits"; fi)
$(if [[ $hostpath == 1 ]]; then printf '      volumeMounts:\n        - {name: ib, mountPath: /dev/infiniband}\n'; fi)
$(if [[ $hostpath == 1 ]]; then printf '  volumes:\n    - name: ib\n      hostPath: {path: /dev/infiniband, type: Directory}\n'; fi)
EOF
}
run_static_pod() {
  cat >"$RK_MANIFESTS/.$1.tmp" && capacity_wait_manifest <"$RK_MANIFESTS/.$1.tmp"
  mv "$RK_MANIFESTS/.$1.tmp" "$RK_MANIFESTS/$1.yaml"
}

rk_kubelet_pods() { in_ns curl -sk -m 5 "https://127.0.0.1:10250/pods" 2>/dev/null; }

# A static Pod is NAME-NODE in the kubelet's view; a Pod created through the API is NAME.
pod_json() {
  rk_kubelet_pods | jq -c --arg s "$1-$RK_NODE" --arg n "$1" \
    '[.items[]? | select(.metadata.name == $s or .metadata.name == $n)][0] // empty'
}

pod_phase() { pod_json "$1" | jq -r '.status.phase // empty'; }

pod_uid() { pod_json "$1" | jq -r '.metadata.uid // empty'; }

container_id() {
  pod_json "$1" | jq -r --arg c "$2" \
    '.status.containerStatuses[]? | select(.name == $c) | .containerID // empty | sub("^containerd://"; "")'
}

wait_pod() {  # NAME PHASE [TIMEOUT]
  local i p
  local end=$((SECONDS + ${3:-60}))  # a deadline: each poll itself takes time
  while ((SECONDS < end)); do
    p=$(pod_phase "$1")
    [[ $p == "$2" ]] && return 0
    [[ $2 == Running && ( $p == Failed || $p == Succeeded ) ]] && break  # will not run any more
    sleep 0.2
  done
  rk_log "pod $1: phase '${p:-none}', wanted $2: $(pod_json "$1" | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
  return 1
}

wait_container_running() {  # NAME CONTAINER [TIMEOUT]
  local i
  local end=$((SECONDS + ${3:-60}))  # a deadline: each poll itself takes time
  while ((SECONDS < end)); do
    local j
    j=$(pod_json "$1")
    jq -e --arg c "$2" '.status.containerStatuses[]? | select(.name == $c) | .state.running' \
      >/dev/null 2>&1 <<<"$j" && return 0
    [[ $(jq -r '.status.phase // empty' <<<"$j" 2>/dev/null) == Failed ]] && break
    sleep 0.2
  done
  rk_log "pod $1 container $2 not running: $(pod_json "$1" | jq -c '.status' 2>/dev/null)"
  return 1
}

pod_log_file() {  # NAME [CONTAINER]
  local id
  id=$(pod_json "$1" | jq -r '.metadata | "\(.namespace)_\(.name)_\(.uid)"')
  [[ -n $id ]] || return 1
  ls -1 "$RK_LOGDIR/pods/$id/${2:-*}"/*.log 2>/dev/null | tail -1
}

pod_logs() {
  local f
  f=$(pod_log_file "$@") && [[ -n $f ]] && cut -d' ' -f4- "$f"
}

wait_log() {  # NAME CONTAINER REGEX [TIMEOUT]
  local i
  local end=$((SECONDS + ${4:-60}))  # a deadline: each poll itself takes time
  while ((SECONDS < end)); do
    pod_logs "$1" "$2" 2>/dev/null | grep -Eq -- "$3" && return 0
    sleep 0.2
  done
  rk_log "pod $1/$2: log never matched '$3'"
  return 1
}

pod_exec() {  # NAME CONTAINER CMD...
  local cid
  cid=$(container_id "$1" "$2")
  shift 2
  [[ -n $cid ]] || { rk_log "no container id"; return 125; }
  ctr_k8s tasks exec --exec-id "rk$$-$RANDOM" "$cid" "$@"
}

container_cgroup_devices() {  # NAME CONTAINER
  local cid d
  cid=$(container_id "$1" "$2")
  [[ -n $cid ]] || return 1
  d=$(find "/sys/fs/cgroup/devices/$RK_CGROOT" -type d -name "$cid" 2>/dev/null | head -1)
  [[ -n $d ]] && cat "$d/devices.list"
}

delete_static_pod() {  # NAME [TIMEOUT]
  local i uid
  uid=$(pod_uid "$1")
  rm -f "$RK_MANIFESTS/$1.yaml"
  local end=$((SECONDS + ${2:-30}))  # a deadline: each poll itself takes time
  while ((SECONDS < end)); do
    [[ -z $(pod_json "$1") ]] && break
    sleep 0.2
  done
  # A static Pod's UID is stable across runs: a leftover exited container would fail the next one.
  local c
  if [[ -n $uid ]]; then
    for c in $(ctr_k8s containers ls -q "labels.\"io.kubernetes.pod.uid\"==$uid" 2>/dev/null); do
      ctr_k8s tasks kill -s KILL "$c" >/dev/null 2>&1
      ctr_k8s tasks delete -f "$c" >/dev/null 2>&1
      ctr_k8s containers rm "$c" >/dev/null 2>&1
    done
  fi
  [[ -z $(pod_json "$1") ]]
}

# ---- fake device nodes -----------------------------------------------------------------------------
make_dev_nodes() {  # SYSFS OUT
  local sys=$1 out=$2 d n dev
  mkdir -p "$out"
  for d in "$sys"/class/infiniband_verbs/uverbs* "$sys"/class/infiniband_mad/umad* \
           "$sys"/class/infiniband_mad/issm* "$sys"/class/misc/rdma_cm; do
    [[ -f $d/dev ]] || continue
    n=$(basename "$d")
    dev=$(cat "$d/dev")
    rm -f "$out/$n"
    mknod -m 0666 "$out/$n" c "${dev%%:*}" "${dev##*:}"
  done
  # umad/issm are root-only on stock hosts
  chmod 0600 "$out"/umad* "$out"/issm* 2>/dev/null
  return 0
}
