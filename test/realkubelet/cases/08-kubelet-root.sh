# Case 8: a kubelet whose --root-dir is not /var/lib/kubelet (k0s: /var/lib/k0s/kubelet), with the
# chart's DaemonSet Pod as helm renders it for `--set kubelet.rootDir=/var/lib/k0s/kubelet` (nothing
# else), run as a static Pod, in both registration modes (issue 19, item 4).
#
# The real kubelet's layout under a moved root is measured first: kubelet.sock and its checkpoint stay
# in /var/lib/kubelet/device-plugins (hard-coded), plugins_registry/ and pod-resources/kubelet.sock
# follow --root-dir. Then, per mode, the agent Pod must start, say in its one log line that it found
# all three paths, register every resource, and read PodResources at the moved root (per-Pod series
# in /metrics for a workload Pod, which only the PodResources API can give it).
#
# Differences from a cluster (as in deploy/test/realkubelet-chart.sh): the image is the busybox image
# with this build's fabric-agent (entrypoint, as in deploy/Dockerfile) and fabric-memlock-hook; the
# ConfigMap becomes a hostPath folder and the ServiceAccount is dropped (pod-to-static.mjs); the Pod
# gets hostNetwork, because every Pod network of this harness chains fabric-cni, which needs the agent.
K0S=/var/lib/k0s/kubelet
EFA=vpc.amazonaws.com/efa
ok=0
DEPLOY_TEST=$ROOT/deploy/test

# ---- helm, the image ------------------------------------------------------------------------------
if [[ ! -f $DEPLOY_TEST/node_modules/.package-lock.json ]]; then
  (cd "$DEPLOY_TEST" && npm ci --no-audit --no-fund --loglevel=error) >&2
fi
tools=$("$DEPLOY_TEST/lib/k8s-tools.sh") || { echo "NOT OK: no helm (deploy/test/lib/k8s-tools.sh)"; exit 1; }
HOOK=$BUILD_DIR/tools/oci-hook/fabric-memlock-hook
[[ -x $HOOK ]] || { echo "NOT OK: $HOOK not built"; exit 1; }
if [[ ! -f $RK_WORK/images/agent.tar ]]; then
  RK_IMAGE_ENTRYPOINT=/usr/local/bin/fabric-agent build_busybox_image "$RK_WORK/images/agent.tar" \
    docker.io/local/fabric-agent:rk "$(realpath "$AGENT"):/usr/local/bin/fabric-agent" \
    "$(realpath "$HOOK"):/opt/fabric/host/fabric-memlock-hook" "$(realpath "$FABRICCTL"):/usr/local/bin/fabricctl" ||
    { echo "NOT OK: agent image build"; exit 1; }
fi
import_image "$RK_WORK/images/agent.tar" || { echo "NOT OK: agent image import"; exit 1; }

render() {  # REGISTRATION: the chart's DaemonSet as a static Pod manifest on stdout
  local d=$RK_WORK/chart-$1
  mkdir -p "$d"
  "$tools/helm" template fabric-device-plugin "$ROOT/deploy/helm/fabric-device-plugin" -n fabric-system \
    --set image.repository=docker.io/local/fabric-agent --set image.tag=rk --set image.pullPolicy=Never \
    --set sysfs.hostPath="$TREE/sys" --set hookDir="$RK_WORK/hook-bin" --set cdiDir="$RK_WORK/cdi" \
    --set kubelet.rootDir=$K0S --set registration="$1" >"$d/rendered.yaml" || return 1
  (cd "$DEPLOY_TEST" && node lib/pod-to-static.mjs --name fabric-agent --config-dir "$d/configmaps" \
    --host-network true <"$d/rendered.yaml")
}

# ---- the kubelet at /var/lib/k0s/kubelet --------------------------------------------------------------
stop_agent
stop_kubelet
# A k0s node never had a kubelet at /var/lib/kubelet: drop what this node's default kubelet left there
# (its device-plugins/ stays: the moved kubelet uses it too).
in_ns rm -rf /var/lib/kubelet/pod-resources /var/lib/kubelet/plugins_registry
export RK_KUBELET_ROOT=$K0S
restore() {
  delete_static_pod c8-wl >/dev/null 2>&1
  delete_static_pod fabric-agent >/dev/null 2>&1
  stop_kubelet
  unset RK_KUBELET_ROOT
  start_kubelet >/dev/null 2>&1 && start_agent
}
trap restore EXIT
start_kubelet || { echo "NOT OK: the kubelet did not start with --root-dir=$K0S"; exit 1; }
layout="device-plugins/kubelet.sock: $(in_ns sh -c 'ls /var/lib/kubelet/device-plugins/kubelet.sock 2>&1')"
layout+="; pod-resources: $(in_ns sh -c "ls $K0S/pod-resources/kubelet.sock /var/lib/kubelet/pod-resources 2>&1" | paste -sd' ')"
echo "kubelet --root-dir=$K0S: $layout"
expect "the kubelet's device-plugin socket stays at /var/lib/kubelet/device-plugins/kubelet.sock" \
  in_ns test -S /var/lib/kubelet/device-plugins/kubelet.sock || ok=1
expect "and nothing of device-plugins/ under $K0S" in_ns test ! -e $K0S/device-plugins || ok=1
expect "pod-resources/kubelet.sock follows --root-dir" in_ns test -S $K0S/pod-resources/kubelet.sock || ok=1
expect "plugins_registry/ follows --root-dir" in_ns test -d $K0S/plugins_registry || ok=1
expect "no pod-resources under /var/lib/kubelet" in_ns test ! -e /var/lib/kubelet/pod-resources || ok=1

registered() {  # MODE LOG: resources the kubelet registered (classic: Register; watcher: the plugin watcher)
  if [[ $1 == watcher ]]; then
    grep -oE 'Registering Plugin [^ ]+ at endpoint [^ ]*plugins_registry[^ ]*' "$2" | sort -u | wc -l
  else
    grep -o 'Got registration request from device plugin with resource name "[^"]*"' "$2" | sort -u | wc -l
  fi
}
# The agent container's log (the rendered Pod's namespace is fabric-system, not default).
agent_pod_log() {
  local f
  f=$(ls -1 "$RK_LOGDIR"/pods/fabric-system_fabric-agent-"$RK_NODE"_"$(pod_uid fabric-agent)"/agent/*.log 2>/dev/null | tail -1)
  [[ -n $f ]] && cut -d' ' -f4- "$f"
}

# auto (the chart's default; takes kubelet.sock where it exists) and watcher.
for mode in auto watcher; do
  restart_kubelet || { echo "NOT OK: kubelet restart ($mode)"; ok=1; break; }
  log=$(kubelet_log)
  render "$mode" >"$RK_WORK/fabric-agent-$mode.yaml" || { echo "NOT OK: render ($mode)"; ok=1; continue; }
  echo "[$mode] rendered kubelet volumes: $(grep -A2 -E 'name: (device-plugins|plugins-registry|pod-resources)$' \
    "$RK_WORK/fabric-agent-$mode.yaml" | grep -oE '(path|type): [^ ]+' | paste -sd' ')"
  echo "[$mode] agent args: $(grep -oE -- '--(kubelet-root|device-plugin-dir|plugins-registry-dir|pod-resources-socket|registration)=[^ ]+' \
    "$RK_WORK/fabric-agent-$mode.yaml" | tr -d "'\"" | paste -sd' ')"
  run_static_pod fabric-agent <"$RK_WORK/fabric-agent-$mode.yaml"
  expect "[$mode] the chart's agent Pod starts" wait_container_running fabric-agent agent 120 || { ok=1; continue; }
  for ((i = 0; i < 300; i++)); do [[ $(registered "$mode" "$log") -ge 4 ]] && break; sleep 0.1; done
  expect "[$mode] the kubelet registered all four resources ($(registered "$mode" "$log"))" \
    test "$(registered "$mode" "$log")" -ge 4 || ok=1
  line=$(agent_pod_log | grep -m1 'registration: ')
  echo "[$mode] agent: $line"
  want_mode=$([[ $mode == watcher ]] && echo "plugin watcher (requested)" || echo "kubelet.sock (auto)")
  expect "[$mode] its one line names the mode" grep -qF "registration: $want_mode" <<<"$line" || ok=1
  expect "[$mode] and found kubelet.sock in /var/lib/kubelet, the rest under $K0S, waiting for none" \
    grep -qF "found: kubelet.sock /var/lib/kubelet/device-plugins/kubelet.sock, plugins_registry $K0S/plugins_registry, pod-resources $K0S/pod-resources/kubelet.sock; waiting for: none" <<<"$line" || ok=1
  if [[ $mode != watcher ]]; then sockdir=/var/lib/kubelet/device-plugins; else sockdir=$K0S/plugins_registry; fi
  socks=$(in_ns sh -c "ls $sockdir" | grep -c '^fabric-.*\.sock$')
  expect "[$mode] the agent's four sockets are in $sockdir ($socks)" test "$socks" -eq 4 || ok=1

  # PodResources at the moved root: a workload's devices appear as per-Pod series.
  mkpod c8-wl "$EFA=2" true | run_static_pod c8-wl
  expect "[$mode] a workload Pod (efa: 2) runs" wait_container_running c8-wl c 90 || ok=1
  want=$(pod_device_ids c8-wl $EFA | paste -sd' ')
  for ((i = 0; i < 50; i++)); do
    got=$(metrics | grep -E "^fabric_pod_device_info\{.*pod=\"c8-wl-$RK_NODE\"" | grep -o 'device="[^"]*"' | cut -d'"' -f2 | sort -u | paste -sd' ')
    [[ -n $got && $got == "$want" ]] && break
    sleep 0.2
  done
  echo "[$mode] kubelet checkpoint: c8-wl holds ${want:-nothing}; /metrics attributes ${got:-nothing}"
  expect "[$mode] PodResources read at $K0S: /metrics attributes the kubelet's devices to the Pod" \
    test -n "$want" -a "$got" == "$want" || ok=1
  delete_static_pod c8-wl >/dev/null 2>&1
  delete_static_pod fabric-agent >/dev/null 2>&1
done
echo "RESULT: kubelet --root-dir=$K0S: chart's Pod with kubelet.rootDir only, registered and reading PodResources in auto (kubelet.sock) and watcher modes"
exit $ok
