# Sourced by every e2e case (test/e2e/cases/NN-name.sh), inside the VM.
# Environment from in-vm.sh: E2E_BUILD_DIR, E2E_CASE_OUT (this case's output
# dir, on the host-shared OUTDIR), E2E_LIB, E2E_IBDEV, E2E_NETDEV, E2E_IP.
# shellcheck shell=bash disable=SC2034  # variables are for the sourcing case
set -uo pipefail
: "${E2E_BUILD_DIR:?}" "${E2E_CASE_OUT:?}" "${E2E_LIB:?}"
IBDEV=${E2E_IBDEV:-rxe0}
NETDEV=${E2E_NETDEV:-eth0}
BUILD=$E2E_BUILD_DIR
OUT=$E2E_CASE_OUT
TMP=$(mktemp -d /tmp/e2e.XXXXXX)
FABRICCTL=$BUILD/tools/fabricctl/fabricctl
AGENT=$BUILD/agent/daemon/fabric-agent
KUBELET_SIM=$BUILD/tools/kubelet-sim/kubelet-sim
MEMLOCK_HOOK=$BUILD/tools/oci-hook/fabric-memlock-hook

_bg_pids=()
# A background command's children are stopped with it: a retry loop (sh -c 'while :; do CMD; done')
# dies at once on SIGTERM and leaves CMD running, and an orphaned verbs or libfabric program keeps its
# uverbs file open, on which `rdma link delete` then blocks for good.
_cleanup() {
  local p kids=()
  for p in "${_bg_pids[@]}"; do kids+=($(pgrep -P "$p" 2>/dev/null)); done
  for p in "${_bg_pids[@]}" "${kids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${_bg_pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap _cleanup EXIT

log() { echo "[$(date +%T.%N | cut -c1-12)] $*"; }
_reason() { echo "$*" >> "$OUT/reason"; }
pass() { [[ $# -gt 0 ]] && _reason "$*"; log "PASS${1:+: $*}"; exit 0; }
fail() { _reason "$*"; log "FAIL: $*"; exit 1; }
skip() { _reason "$*"; log "SKIP: $*"; exit 77; }
# A pass that carries a note (e.g. which part is not implemented yet).
note() { _reason "$*"; log "note: $*"; }
check() {  # check "what" cmd... : fail with "what" when cmd fails
  local what=$1; shift
  "$@" || fail "$what"
}

# start_bg NAME CMD... : runs CMD in the background, output in $OUT/NAME.log;
# remembered for cleanup. Sets BG_PID.
start_bg() {
  local name=$1; shift
  "$@" > "$OUT/$name.log" 2>&1 &
  BG_PID=$!
  _bg_pids+=("$BG_PID")
  log "started $name (pid $BG_PID): $*"
}

# wait_for SECONDS CMD... : polls CMD every 0.1 s; returns 1 on timeout.
wait_for() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@"; do
    (( $(date +%s%N) < deadline )) || return 1
    sleep 0.1
  done
}

# need_exe PATH : skip the case while the binary is not built yet.
need_exe() {
  [[ -x $1 ]] || skip "${1#"$BUILD"/} not built yet"
}
# has_flag BIN FLAG : the binary's --help mentions FLAG.
has_flag() {
  "$1" --help 2>&1 | grep -q -- "$2"
}
need_flag() {
  has_flag "$1" "$2" || skip "$(basename "$1") has no $2 yet"
}

# open_rw PATH : prints "OK" or the error text of open(O_RDWR) (from the shell).
open_rw() {
  local err
  if err=$( { exec 3<>"$1"; } 2>&1 ); then echo OK; else echo "$err"; fi
}

# ibdev_uverbs IBDEV : prints "uverbsN MAJ:MIN" from /sys/class/infiniband_verbs.
ibdev_uverbs() {
  local u
  for u in /sys/class/infiniband_verbs/uverbs*; do
    [[ $(cat "$u/ibdev" 2>/dev/null) == "$1" ]] && { echo "${u##*/} $(cat "$u/dev")"; return 0; }
  done
  return 1
}
# devnode_numbers PATH : prints "MAJ:MIN" of a device node (decimal).
devnode_numbers() {
  echo "$((16#$(stat -c %t "$1"))):$((16#$(stat -c %T "$1")))"
}
# roce_v2_ipv4_gid_index IBDEV : the GID index of the RoCE v2 IPv4-mapped GID.
roce_v2_ipv4_gid_index() {
  local d=/sys/class/infiniband/$1/ports/1 i t g
  for i in $(seq 0 15); do
    t=$(cat "$d/gid_attrs/types/$i" 2>/dev/null) || continue
    g=$(cat "$d/gids/$i" 2>/dev/null) || continue
    case "$t:$g" in "RoCE v2:0000:0000:0000:0000:0000:ffff:"*) echo "$i"; return 0 ;; esac
  done
  return 1
}

# --- runc bundles (host userland bind-mounted read-only) ---
# make_bundle DIR : a runc bundle whose rootfs mounts the host's /usr, /etc and
# the build dir read-only (after a tmpfs /tmp: the build dir may be under
# /tmp), in the VM's network namespace (as hostNetwork RDMA
# pods run, and so no extra netns exists for 06-netns). Writes DIR/base.json.
make_bundle() {
  local b=$1
  mkdir -p "$b/rootfs"/{proc,sys,dev,usr,etc,tmp}
  local l
  for l in lib lib64 bin sbin; do ln -sfn "usr/$l" "$b/rootfs/$l"; done
  mkdir -p "$b/rootfs$BUILD"
  (cd "$b" && rm -f config.json && runc spec) || return 1
  jq --arg build "$BUILD" '
      .process.terminal = false
    | .root.readonly = true
    | .linux.namespaces |= map(select(.type != "network"))
    | .mounts += [
        {destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev"]},
        {destination: "/usr", type: "bind", source: "/usr", options: ["rbind", "ro"]},
        {destination: "/etc", type: "bind", source: "/etc", options: ["rbind", "ro"]},
        {destination: $build, type: "bind", source: $build, options: ["rbind", "ro"]}]' \
    "$b/config.json" > "$b/base.json"
}
# runc_run DIR ID JQ_FILTER [jq args...] : config.json = base.json | FILTER,
# then `runc run`; output on stdout; returns runc's exit code.
runc_run() {
  local b=$1 id=$2 filter=$3; shift 3
  jq "$@" "$filter" "$b/base.json" > "$b/config.json" || return 99
  (cd "$b" && runc run "$id" </dev/null)
  local rc=$?
  runc delete -f "$id" >/dev/null 2>&1
  return $rc
}

# --- kubelet-sim output (tools/kubelet-sim/main.cc) ---
# sim_devices LOG RESOURCE [FROM_LINE] : "id health" per device of the last
# device list printed for RESOURCE ("  RES: capacity ..." then "    id health numa [..]").
sim_devices() {
  awk -v res="  $2: capacity" -v from="${3:-0}" '
    NR <= from { next }
    index($0, res) == 1 { n = 0; inblk = 1; delete ids; next }
    inblk && /^    [^ ]/ && $1 != "devices:" { ids[++n] = $1 " " $2; next }
    { inblk = 0 }
    END { for (i = 1; i <= n; i++) print ids[i] }' "$1"
}
# sim_granted LOG : "host_path container_path permissions" per Allocate device.
sim_granted() {
  awk '/^    devices:$/ { d = 1; next } /^    [a-z_]+:$/ { d = 0 }
       d && / -> / { gsub(/[()]/, "", $4); print $1, $3, $4 }' "$1"
}
# start_agent_with_sim K SIMARGS... : kubelet-sim (log sim.log) under kubelet
# root K, then the agent (log agent.log) once kubelet.sock exists.
start_agent_with_sim() {
  local k=$1; shift
  mkdir -p "$k"
  start_bg kubelet-sim "$KUBELET_SIM" --root "$k" "$@"
  SIM_PID=$BG_PID
  wait_for 30 test -S "$k/device-plugins/kubelet.sock" || fail "kubelet-sim: no kubelet.sock after 30 s"
  start_bg agent "$AGENT" --sysfs-root /sys --dev-root /dev --kubelet-root "$k" \
    --device-plugin-dir "$k/device-plugins" --registration kubelet --metrics-address 127.0.0.1:0
  AGENT_PID=$BG_PID
}
# pid_alive PID : a running, not yet reaped (and not zombie) process.
pid_alive() { [[ -e /proc/$1 ]] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
