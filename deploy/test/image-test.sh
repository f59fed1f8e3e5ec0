#!/usr/bin/env bash
# deploy/test/image-test.sh: the "image and install" step of tools/test.sh.
# Builds the image (deploy/build-image.sh), proves the host binaries are
# static by running them in an EMPTY container, renders the chart with the
# real helm, and runs the rendered DaemonSet Pod with podman exactly as
# rendered (init containers that install onto the host, the agent with the
# chart's flags, mounts and securityContext) against a bundled sample node and
# tools/kubelet-sim. Prints PASS/FAIL per case and "N passed, N failed".
#
# Env: FABRIC_BINARY_DIR (build tree with kubelet-sim and fake-podresources;
#      default build/), FABRIC_IMAGE (default localhost/fabric-agent:test),
#      FABRIC_IMAGE_BUILD=0 (use $FABRIC_IMAGE as it is),
#      FABRIC_IMAGE_BUDGET_MB (default below), FABRIC_PODMAN_ULIMITS (default
#      "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024": the build machines'
#      root lacks CAP_SYS_RESOURCE, so runc cannot raise rlimits; set it empty
#      on a normal host).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
BIN="${FABRIC_BINARY_DIR:-$repo/build}"
IMAGE="${FABRIC_IMAGE:-localhost/fabric-agent:test}"
# Budget: see docs/quickstart.md ("Image size"). Measured 2026-12: see the note.
BUDGET_MB="${FABRIC_IMAGE_BUDGET_MB:-140}"
read -r -a ULIMITS <<<"${FABRIC_PODMAN_ULIMITS---ulimit nofile=1024:1024 --ulimit nproc=1024:1024}"
SAMPLE="$repo/test/testdata/nodes/p5.48xlarge"

skip() { echo "image-test: skip: $*"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root (podman with bind mounts of kubelet-style dirs)"
command -v podman >/dev/null || skip "podman not installed (apt-get install podman)"
for b in tools/kubelet-sim/kubelet-sim tools/fake-podresources/fake-podresources; do
  [[ -x "$BIN/$b" ]] || skip "$BIN/$b not built (ninja kubelet-sim fake-podresources)"
done

W="$(mktemp -d /tmp/fabric-image-test.XXXXXX)"
mkdir -p "$W/log"
passed=0 failed=0
pids=()
cleanup() {
  podman rm -f -t 2 image-test-agent image-test-agent-default >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if ((failed == 0)) && [[ -z "${FABRIC_KEEP:-}" ]]; then rm -rf "$W"; else echo "image-test: kept $W"; fi
}
trap cleanup EXIT

# run_case NAME FUNCTION: PASS/FAIL with the case's time; a failure shows the
# tail of its log.
run_case() {
  local name=$1 fn=$2 t0 t1 rc
  t0=$(date +%s.%N)
  "$fn" >"$W/log/$fn.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if ((rc == 0)); then
    passed=$((passed + 1)); echo "PASS $name (${secs}s)"
  else
    failed=$((failed + 1)); echo "FAIL $name (${secs}s)"; grep -v '^NOTE ' "$W/log/$fn.log" | tail -n 25 | sed 's/^/     /'
  fi
  grep '^NOTE ' "$W/log/$fn.log" | sed 's/^NOTE /     /'
  return 0
}
podman_run() { podman run "${ULIMITS[@]}" "$@"; }
wait_for_socket() { local i; for ((i = 0; i < 100; i++)); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no $1"; return 1; }

# ---------------------------------------------------------------- the image
c_build() {
  if [[ ${FABRIC_IMAGE_BUILD:-1} == 0 ]]; then podman image exists "$IMAGE"; return; fi
  "$repo/deploy/build-image.sh" -t "$IMAGE"
}

c_size() {
  local bytes mb
  bytes=$(podman image inspect "$IMAGE" --format '{{.Size}}') || return 1
  mb=$((bytes / 1000000))
  echo "NOTE image $IMAGE: ${mb} MB (budget ${BUDGET_MB} MB)"
  ((mb <= BUDGET_MB))
}

# Copy the host binaries out of the image; static means no PT_INTERP and no
# DT_NEEDED at all.
c_static() {
  local cid f
  cid=$(podman create "$IMAGE") || return 1
  podman cp "$cid:/opt/fabric/host" "$W/host" && podman rm "$cid" >/dev/null || return 1
  for f in "$W/host/fabric-cni" "$W/host/fabric-memlock-hook"; do
    file "$f"
    if readelf -lW "$f" | grep -q 'Requesting program interpreter'; then echo "$f has an interpreter"; return 1; fi
    if readelf -dW "$f" | grep -q NEEDED; then readelf -dW "$f" | grep NEEDED; return 1; fi
    echo "NOTE $(basename "$f"): $(stat -c %s "$f") bytes, no NEEDED, no interpreter"
  done
}

# An image that holds nothing but the binary.
scratch_image() {  # binary tag
  local ctx
  ctx="$W/scratch-$(basename "$1")"
  mkdir -p "$ctx" && cp "$1" "$ctx/bin" && printf 'FROM scratch\nCOPY bin /%s\nENTRYPOINT ["/%s"]\n' "$(basename "$1")" "$(basename "$1")" >"$ctx/Containerfile"
  podman build --network=none -q -t "$2" -f "$ctx/Containerfile" "$ctx" >/dev/null
}

c_scratch_cni_version() {
  scratch_image "$W/host/fabric-cni" localhost/fabric-cni-scratch:test || return 1
  podman image inspect localhost/fabric-cni-scratch:test --format '{{len .RootFS.Layers}} layer(s)'
  local out
  out=$(echo '{"cniVersion":"1.0.0","name":"x","type":"fabric-cni"}' |
    podman_run --rm -i --network=none -e CNI_COMMAND=VERSION localhost/fabric-cni-scratch:test) || return 1
  echo "$out"
  jq -e '.supportedVersions | index("1.0.0")' <<<"$out" >/dev/null
}

c_scratch_hook() {
  scratch_image "$W/host/fabric-memlock-hook" localhost/fabric-memlock-hook-scratch:test || return 1
  podman_run --rm --network=none localhost/fabric-memlock-hook-scratch:test --help 2>&1 | grep -q 'RLIMIT_MEMLOCK' || return 1
  # The hook as a runtime calls it: the OCI state on stdin; pid 1 is itself.
  echo '{"ociVersion":"1.0.2","id":"t","status":"created","pid":1,"bundle":"/"}' |
    podman_run --rm -i --network=none localhost/fabric-memlock-hook-scratch:test --memlock=64Mi --best-effort
}

# ------------------------------------------------- the chart, as rendered
render() {
  (cd "$here" && if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
     npm ci --no-audit --no-fund --loglevel=error; fi) >&2 || return 1
  tools=$("$here/lib/k8s-tools.sh") || return 1
  "$tools/helm" template fabric-device-plugin "$repo/deploy/helm/fabric-device-plugin" -n fabric-system \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
    --set kubelet.rootDir="$W/kubelet" --set kubelet.devicePluginDir="$W/kubelet/device-plugins" \
    --set cdiDir="$W/cdi" --set hookDir="$W/hook-bin" \
    --set sysfs.hostPath="$SAMPLE/sys" \
    --set cni.enabled=true --set cni.binDir="$W/cni-bin" --set cni.confDir="$W/net.d" \
    --set cni.netnsDir="$W/netns" --set cni.socketDir="$W/run"
}

tools=""
c_render() {
  render >"$W/rendered.yaml" || return 1
  mkdir -p "$W/kubelet/device-plugins"  # the kubelet's own folder
  (cd "$here" && node lib/pod-to-podman.mjs --workdir "$W" --image "$IMAGE" \
     --map "/var/lib/fabric-agent=$W/state" <"$W/rendered.yaml") >"$W/pod.json" || return 1
  jq -r '.init[].name, .containers[].name' "$W/pod.json"
  echo "NOTE rendered with helm $("$tools/helm" version --short)"
}

pod_args() { jq -r "$1 | .args[]" "$W/pod.json"; }

c_init_containers() {
  local n i
  n=$(jq '.init | length' "$W/pod.json")
  for ((i = 0; i < n; i++)); do
    mapfile -t a < <(pod_args ".init[$i]")
    podman_run "${a[@]}" || return 1
  done
  ls -l "$W/hook-bin" "$W/cni-bin"
  cmp "$W/hook-bin/fabric-memlock-hook" "$W/host/fabric-memlock-hook" || return 1
  cmp "$W/cni-bin/fabric-cni" "$W/host/fabric-cni" || return 1
  # What was installed runs on this host as the runtime would run it.
  echo '{"cniVersion":"1.0.0","name":"x","type":"fabric-cni"}' | CNI_COMMAND=VERSION "$W/cni-bin/fabric-cni"
}

c_agent_registers() {
  "$BIN/tools/fake-podresources/fake-podresources" "$W/kubelet/pod-resources/kubelet.sock" \
    default/web >"$W/log/podresources.out" 2>&1 &
  pids+=($!)
  timeout 90 "$BIN/tools/kubelet-sim/kubelet-sim" --root "$W/kubelet" --expect-resources 4 \
    --allocate vpc.amazonaws.com/efa=2 --serve >"$W/log/kubelet-sim.out" 2>&1 &
  pids+=($!)
  # registration=auto picks kubelet.sock when it exists when the agent starts.
  wait_for_socket "$W/kubelet/device-plugins/kubelet.sock" || return 1
  mapfile -t a < <(pod_args ".containers[0]")
  # -d: the agent keeps running for the CNI case; same arguments otherwise.
  podman_run -d "${a[@]}" >/dev/null || return 1
  local i
  for ((i = 0; i < 60; i++)); do
    grep -q '^== Allocations' "$W/log/kubelet-sim.out" && break
    sleep 1
  done
  sed -n '/^== Registrations/,$p' "$W/log/kubelet-sim.out" | grep -v '^\s*$' | head -40
  podman logs image-test-agent 2>&1 | tail -5
  grep -q 'resource=vpc.amazonaws.com/efa .* OK' "$W/log/kubelet-sim.out" || return 1
  grep -q 'vpc.amazonaws.com/efa: capacity 32, allocatable 32' "$W/log/kubelet-sim.out" || return 1
  grep -Eq 'vpc.amazonaws.com/efa x2 -> \[rdmap' "$W/log/kubelet-sim.out" || return 1
  # The CDI spec names the hook where the chart's init container put it.
  local hook
  hook=$(jq -r '[.. | objects | select(has("path")) | .path | select(endswith("fabric-memlock-hook"))][0] // empty' \
    "$W"/cdi/*.json)
  echo "CDI hook path: $hook"
  [[ $hook == "$W/hook-bin/fabric-memlock-hook" && -x $hook ]] || return 1
  echo "NOTE $(grep -c '\] .*resource=.* OK' "$W/log/kubelet-sim.out") resources registered; efa capacity 32"
}

c_cni_add_del() {
  [[ -S "$W/run/agent.sock" ]] || { echo "no $W/run/agent.sock"; return 1; }
  local conf out
  conf='{"cniVersion":"1.0.0","name":"pod-net","type":"fabric-cni","agentSocket":"'"$W/run/agent.sock"'",
    "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],
    "ips":[{"address":"10.1.2.3/24","interface":0}]}}'
  local envs=(-e CNI_CONTAINERID=c0ffee -e CNI_NETNS=/var/run/netns/x -e CNI_IFNAME=eth0
    -e CNI_PATH=/opt/cni/bin -e 'CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=c0ffee')
  out=$(podman_run --rm -i --network=none -v "$W/run:$W/run" -e CNI_COMMAND=ADD "${envs[@]}" \
    localhost/fabric-cni-scratch:test <<<"$conf") || { echo "$out"; return 1; }
  echo "ADD: $out"
  jq -e '.ips[0].address == "10.1.2.3/24"' <<<"$out" >/dev/null || return 1
  podman_run --rm -i --network=none -v "$W/run:$W/run" -e CNI_COMMAND=DEL "${envs[@]}" \
    localhost/fabric-cni-scratch:test <<<"$conf" || return 1
  echo "DEL: ok"
  podman logs image-test-agent 2>&1 | grep '\[cni\]' | tail -4
}

c_fabricctl_devices() {
  local out
  out=$(podman_run --rm --network=none --read-only --cap-drop=ALL --security-opt=no-new-privileges \
    -v "$SAMPLE/sys:/host/sys:ro" --entrypoint /usr/local/bin/fabricctl "$IMAGE" \
    devices --sysfs-root=/host/sys) || { echo "$out"; return 1; }
  echo "$out" | head -12
  local n; n=$(grep -c 'rdmap' <<<"$out")
  echo "NOTE fabricctl devices: $n EFA devices listed"
  ((n == 32))
}

# libfabric is loaded with dlopen (agent/libfabric), so ldd cannot put it into
# the runtime packages: the image must carry it for the doctor and check/bench.
c_fabricctl_check_libfabric() {
  local out
  out=$(podman_run --rm --network=none --read-only --cap-drop=ALL --security-opt=no-new-privileges \
    -v "$SAMPLE/sys:/host/sys:ro" --entrypoint /usr/local/bin/fabricctl "$IMAGE" \
    check --sysfs-root=/host/sys 2>&1)
  sed -n '/libfabric providers/,/^verdict/p' <<<"$out"
  grep -q 'libfabric providers' <<<"$out" && grep -Eq '^  (tcp|shm)' <<<"$out" &&
    ! grep -q 'cannot be loaded' <<<"$out"
}

# The agent as shipped links only what it must (tools/bench/link_guard_test.sh:
# no OpenSSL, gRPC/protobuf/abseil static, no libfabric) and fabric-cni is static.
c_link_guard() {
  local cid
  cid=$(podman create "$IMAGE") || return 1
  podman cp "$cid:/usr/local/bin/fabric-agent" "$W/fabric-agent.image" && podman rm "$cid" >/dev/null || return 1
  "$repo/tools/bench/link_guard_test.sh" "$W/fabric-agent.image" "$W/host/fabric-cni"
}

# The chart's defaults (no CNI part): the agent runs with EVERY capability
# dropped, no hostNetwork, read-only root, /host/sys read-only.
c_agent_default_caps() {
  local d="$W/d"  # short: unix socket paths stay under 108 bytes
  mkdir -p "$d/kubelet/device-plugins"
  "$tools/helm" template fabric-device-plugin "$repo/deploy/helm/fabric-device-plugin" -n fabric-system \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
    --set kubelet.rootDir="$d/kubelet" --set kubelet.devicePluginDir="$d/kubelet/device-plugins" \
    --set cdiDir="$d/cdi" --set hookDir="$d/hook-bin" \
    --set sysfs.hostPath="$SAMPLE/sys" >"$d/rendered.yaml" || return 1
  (cd "$here" && node lib/pod-to-podman.mjs --workdir "$d" --image "$IMAGE" <"$d/rendered.yaml") \
    >"$d/pod.json" || return 1
  mapfile -t a < <(jq -r '.containers[0].args[]' "$d/pod.json")
  a=("${a[@]/image-test-agent/image-test-agent-default}")
  printf '%s\n' "${a[@]}" | grep -- '^--cap' | paste -sd' '
  printf '%s\n' "${a[@]}" | grep -q -- '--cap-add' && { echo "default render adds capabilities"; return 1; }
  timeout 60 "$BIN/tools/kubelet-sim/kubelet-sim" --root "$d/kubelet" --expect-resources 4 \
    >"$d/kubelet-sim.out" 2>&1 &
  local sim=$!
  wait_for_socket "$d/kubelet/device-plugins/kubelet.sock" || return 1
  podman_run -d "${a[@]}" >/dev/null || return 1
  wait "$sim"
  local rc=$?
  podman rm -f -t 5 image-test-agent-default >/dev/null 2>&1
  sed -n '/^== Devices/,/^== Alloc/p' "$d/kubelet-sim.out" | grep capacity
  ((rc == 0)) && grep -q 'vpc.amazonaws.com/efa: capacity 32' "$d/kubelet-sim.out"
}

# Pod removed: what stays on the host is what the docs say stays.
c_uninstall() {
  podman stop -t 10 image-test-agent >/dev/null || return 1
  local left
  left=$(find "$W/kubelet/device-plugins" "$W/kubelet/plugins_registry" "$W/run" -mindepth 1 \
    ! -name kubelet.sock ! -name kubelet_internal_checkpoint -print)
  echo "left in kubelet dirs / socket dir: ${left:-nothing}"
  [[ -z "$left" ]] || return 1
  echo "NOTE stays (documented): $(cd "$W" && find hook-bin cni-bin cdi state -type f 2>/dev/null | sort | paste -sd' ')"
}

run_case "image: deploy/build-image.sh" c_build
run_case "image: size within budget" c_size
run_case "image: host binaries fully static (readelf)" c_static
run_case "image: fabric-agent links only what it must (link guard)" c_link_guard
run_case "empty container: fabric-cni answers VERSION" c_scratch_cni_version
run_case "empty container: fabric-memlock-hook runs" c_scratch_hook
run_case "chart: helm template (real helm v4), DaemonSet -> podman" c_render
run_case "chart pod: init containers install hook + cni onto the host" c_init_containers
run_case "chart pod: agent as rendered registers with kubelet-sim (ro root, caps per chart)" c_agent_registers
run_case "empty container: fabric-cni ADD/DEL against the image's agent" c_cni_add_del
run_case "image: fabricctl devices (ro root, no caps, /host/sys ro)" c_fabricctl_devices
run_case "image: fabricctl check loads libfabric (dlopen) and lists providers" c_fabricctl_check_libfabric
run_case "chart defaults (no CNI): agent with ALL capabilities dropped registers, efa 32" c_agent_default_caps
run_case "chart pod removed: no sockets left behind" c_uninstall
echo "$passed passed, $failed failed"
((failed == 0))
