#!/usr/bin/env bash
# The chart's DaemonSet, as rendered by the real helm, run as a static Pod under
# the REAL kubelet (test/realkubelet/lib.sh: kubelet + containerd + runc in a
# private mount/network namespace), from the image deploy/build-image.sh built,
# imported into containerd. CNI part on.
#
#   deploy/test/realkubelet-chart.sh
#
# What differs from a cluster, and why:
#   - a static Pod cannot mount a ConfigMap or use a ServiceAccount: the
#     rendered ConfigMap's config.yaml is put in a hostPath folder with the same
#     file, and serviceAccountName is dropped (lib/pod-to-static.mjs);
#   - host paths the sandbox moves: sysfs.hostPath = a bundled sample node
#     (p5.48xlarge; real char devices with its numbers over /dev/infiniband),
#     hookDir and cni.binDir/confDir = the harness's folders (containerd's
#     bin_dir/conf_dir); /var/lib/kubelet, /var/run and /var/lib are the
#     namespace's own, so the chart's defaults stay; the namespace's root mount
#     is made shared again, as systemd makes / on a node (HostToContainer).
#   - the CNI chain (bridge + host-local, fabric-cni chained last) is written by
#     the test as a cluster admin would; the chart never edits /etc/cni/net.d.
# Prints PASS/FAIL per case and "N passed, N failed"; one SKIP line (exit 0)
# where a part cannot be had (root, containerd, kubelet build, the image).
# Env: FABRIC_IMAGE (default localhost/fabric-agent:test).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
IMAGE="${FABRIC_IMAGE:-localhost/fabric-agent:test}"
TREE=$repo/test/testdata/nodes/p5.48xlarge
RKDIR=$repo/test/realkubelet
skip() { echo "realkubelet-chart: SKIP $*"; exit 0; }

[[ -f $RKDIR/lib.sh ]] || skip "no real-kubelet harness (test/realkubelet/lib.sh)"
[[ $(id -u) == 0 ]] || skip "needs root"
command -v podman >/dev/null || skip "podman not installed"
podman image exists "$IMAGE" || skip "image $IMAGE not built (deploy/test/image-test.sh builds it)"
# shellcheck source=../../test/realkubelet/lib.sh
source "$RKDIR/lib.sh"
RK_KUBELET=$("$RKDIR/build-kubelet.sh" 2>/tmp/realkubelet-chart-build-kubelet.log | tail -1)
rc=$?
[[ $rc == 0 && -x $RK_KUBELET ]] || skip "no kubelet binary (build-kubelet.sh rc $rc: $(tail -1 /tmp/realkubelet-chart-build-kubelet.log))"
export RK_KUBELET

WORK=$(mktemp -d /var/tmp/frc.XXXXXX)
RK_DEV_IB=$WORK/dev-ib
export RK_DEV_IB
rk_init "$WORK" rk-node
why=$(rk_check_parts) || { rm -rf "$WORK"; skip "$why"; }
make_dev_nodes "$TREE/sys" "$RK_DEV_IB"

# containerd's CNI config: bridge, then fabric-cni (installed by the chart's
# init container into the same bin folder, not by the harness).
cat >"$WORK/10-rk.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rk-net",
  "plugins": [
    { "type": "bridge", "bridge": "rk0", "isGateway": true, "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.99.0.0/24" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "fabric-cni", "agentSocket": "/var/run/fabric-agent/agent.sock",
      "logFile": "/var/log/fabric-cni.log", "logLevel": "debug" }
  ]
}
EOF
RK_CNI_CONFLIST=$WORK/10-rk.conflist
export RK_CNI_CONFLIST

# ctr exec inside the namespace (its fifos live in the namespace's /run).
pexec() {  # POD CONTAINER CMD...
  local cid
  cid=$(container_id "$1" "$2")
  shift 2
  [[ -n $cid ]] || return 125
  in_ns ctr --address "$RK_SOCK" -n k8s.io tasks exec --exec-id "rkc$$-$RANDOM" "$cid" "$@"
}
checkpoint() { cat "$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint" 2>/dev/null; }
passed=0 failed=0
result() {  # NAME STATUS [DETAIL]
  if [[ $2 == 0 ]]; then passed=$((passed + 1)); echo "PASS $1${3:+: $3}"
  else failed=$((failed + 1)); echo "FAIL $1${3:+: $3}"; fi
}
cleanup() {
  stop_cluster >>"$WORK/setup.log" 2>&1
  if ((failed)) || [[ -n ${RK_KEEP:-} ]]; then echo "realkubelet-chart: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# ---- render, convert, import -------------------------------------------------------------------------
(cd "$here" && [[ -f node_modules/.package-lock.json ]] || npm ci --no-audit --no-fund --loglevel=error) >&2
tools=$("$here/lib/k8s-tools.sh") || { echo "FAIL render: no helm"; echo "0 passed, 1 failed"; exit 1; }
"$tools/helm" template fabric-device-plugin "$repo/deploy/helm/fabric-device-plugin" -n fabric-system \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set sysfs.hostPath="$TREE/sys" --set hookDir="$WORK/hook-bin" \
  --set cni.enabled=true --set cni.binDir="$WORK/cni/bin" --set cni.confDir="$WORK/cni/net.d" \
  >"$WORK/rendered.yaml"
(cd "$here" && node lib/pod-to-static.mjs --name fabric-agent --config-dir "$WORK/configmaps" \
  <"$WORK/rendered.yaml") >"$WORK/fabric-agent.yaml"
result "render: helm template -> static Pod (ConfigMap -> hostPath, no ServiceAccount)" $?

{
  build_pause_image "$WORK/images/pause.tar" &&
  build_busybox_image "$WORK/images/busybox.tar" docker.io/local/busybox:rk &&
  podman save --format oci-archive -o "$WORK/images/agent.tar" "$IMAGE"
} >>"$WORK/setup.log" 2>&1
start_cluster >>"$WORK/setup.log" 2>&1 &&
  # The chart mounts /var/run/netns with HostToContainer propagation, which
  # needs the host path on a shared (or slave) mount; on a node, systemd makes
  # / shared. The harness's namespace was made private: share its root again
  # (a new peer group inside the namespace; the host is not affected).
  in_ns mount --make-shared / || { tail -30 "$WORK/setup.log"; result "cluster starts" 1; echo "$passed passed, $failed failed"; exit 1; }
import_image "$WORK/images/pause.tar" && import_image "$WORK/images/busybox.tar" &&
  ctr_k8s images import --no-unpack=false "$WORK/images/agent.tar" >/dev/null
result "image imported into containerd ($(ctr_k8s images ls -q | grep -c fabric-agent) ref)" $?

# ---- the agent Pod --------------------------------------------------------------------------------------
run_static_pod fabric-agent <"$WORK/fabric-agent.yaml"
wait_container_running fabric-agent agent 120
rc=$?
st=$(pod_json fabric-agent | jq -c '[.status.initContainerStatuses[]? | {n: .name, s: (.state | keys[0]), rc: .state.terminated.exitCode}]')
result "agent Pod runs as rendered (init containers: $st)" $rc
[[ $rc == 0 ]] || { pod_json fabric-agent | jq -c .status | head -c 1500; echo; tail -20 "$(kubelet_log)"; }

regs() { grep -o 'Got registration request from device plugin with resource name "[^"]*"' "$(kubelet_log)" | sort -u | wc -l; }
for ((i = 0; i < 300; i++)); do [[ $(regs) -ge 4 ]] && break; sleep 0.1; done
n_efa=$(checkpoint | jq -r '.Data.RegisteredDevices["vpc.amazonaws.com/efa"] // [] | length')
[[ $(regs) -ge 4 && $n_efa == 32 ]]
result "registers 4 resources with the real kubelet; efa 32 in its checkpoint (got $(regs), efa $n_efa)" $?

# ---- a workload Pod gets its devices ----------------------------------------------------------------
# hostNetwork: the grant alone, no CNI. (A Pod with fabric devices in its own
# netns also needs the agent's CNI ADD, which reads the RDMA netns mode over
# NETLINK_RDMA: that needs ib_core in the kernel, which this machine lacks.)
mkpod wl "vpc.amazonaws.com/efa=2" true | run_static_pod wl
wait_container_running wl c 90
rc=$?
ids=$(checkpoint | jq -r --arg u "$(pod_uid wl)" '[.Data.PodDeviceEntries[]? | select(.PodUID == $u) | .DeviceIDs | if type == "object" then [.[][]] else . end | .[]] | join(",")')
devs=$(pexec wl c ls /dev/infiniband 2>&1 | paste -sd,)
env_devs=$(pexec wl c env 2>&1 | grep '^FABRIC' | head -2 | paste -sd' ')
[[ $rc == 0 && $ids == *,* && $devs == *uverbs* ]]
result "workload Pod (efa: 2) runs with its devices: $ids -> /dev/infiniband: $devs ${env_devs}" $?

# ---- the CNI part: the runtime calls the installed fabric-cni for the next Pod ---------------------------
mkpod wlnet "" false | run_static_pod wlnet
wait_container_running wlnet c 90
rc=$?
ip=$(pod_json wlnet | jq -r '.status.podIP // empty')
# The conflist chains fabric-cni after bridge: a sandbox comes up only if
# every plugin's ADD succeeded, so a running Pod with a bridge address means
# containerd ran the installed fabric-cni and it answered.
[[ $rc == 0 && -x $WORK/cni/bin/fabric-cni && $ip == 10.99.0.* ]]
result "install-cni put fabric-cni in containerd's bin dir; the next Pod's sandbox ran the chain through it (podIP ${ip:-none})" $?
# And a Pod with fabric devices in its own netns: containerd -> fabric-cni ->
# the agent in the chart's Pod (over /var/run/fabric-agent/agent.sock). An
# EFA-only Pod needs nothing moved, so the agent admits it even though this
# kernel has no RDMA netlink (no ib_core), and records its attribution.
mkpod wlefa "vpc.amazonaws.com/efa=1" false | run_static_pod wlefa
wait_container_running wlefa c 90
rc=$?
ip=$(pod_json wlefa | jq -r '.status.podIP // empty')
records=$(in_ns sh -c 'ls /var/lib/fabric-agent/cni 2>/dev/null' | grep -c . || true)
[[ $rc == 0 && $ip == 10.99.0.* && $records -ge 1 ]]
result "a Pod with efa in its own netns: containerd -> fabric-cni -> the agent admits it (podIP ${ip:-none}, ${records:-0} attachment record(s) in the agent's state)" $?
delete_static_pod wlefa >/dev/null 2>&1

# ---- uninstall: remove the Pods, then look for leftovers ---------------------------------------------------
delete_static_pod wl >/dev/null 2>&1
delete_static_pod wlnet >/dev/null 2>&1
# The agent Pod: remove its manifest and let the kubelet stop it (SIGTERM,
# then the Pod's grace period), as a DaemonSet Pod is deleted on uninstall.
agent_cid=$(container_id fabric-agent agent)
t0=$(date +%s.%N)
rm -f "$RK_MANIFESTS/fabric-agent.yaml"
task_status() { ctr_k8s tasks ls 2>/dev/null | awk -v c="$agent_cid" '$1 == c { print $3 }'; }
echo "agent task ${agent_cid:0:12}: $(task_status)"
for ((i = 0; i < 400; i++)); do
  [[ $(task_status) == RUNNING ]] || break
  sleep 0.1
done
stop_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
delete_static_pod fabric-agent >/dev/null 2>&1
left=$(find "$RK_KUBELET_DIR/device-plugins" "$RK_KUBELET_DIR/plugins_registry" -mindepth 1 \
  ! -name kubelet.sock ! -name kubelet_internal_checkpoint ! -name DEPRECATION 2>/dev/null)
left+=$(in_ns sh -c 'ls -A /var/run/fabric-agent 2>/dev/null')
stays=$(ls "$WORK/hook-bin" "$WORK/cni/bin/fabric-cni" 2>/dev/null | paste -sd' ')
[[ -z $left ]]
result "Pod removed (agent stopped in ${stop_s}s): no sockets left (left: ${left:-none}); stays as documented: $stays" $?

echo "$passed passed, $failed failed"
((failed == 0))
