#!/bin/bash
# 10-observe (issue 17): the observed transport per Pod, with the real kubelet v1.20.2, containerd
# and runc in the soft-RoCE VM (started as in 09: lib/rk-vm.sh). The Pods are NOT hostNetwork: a
# CNI network (bridge + host-local + loopback from containernetworking-plugins, in containerd's CRI
# config) gives each its own netns on the bridge e2e-cni0 (10.99.0.0/24; the VM's root netns is
# 10.99.0.1). Peers run in the root netns. The agent runs with --observe --sample-period 1s, and
# `fabricctl observe --pod default/NAME --window 15s -o json` must say, at once for all Pods:
#   a. o-rdma (device.gpustack.ai/rdma: 1) runs ibv_rc_pingpong over its device, its peer a host
#      process on the same device: rdma, its own QPs, and shared-ambiguous naming the host process
#      (issue 27, item 2: the device's counters carry the peer's packets too);
#   b. o-tcp (the same spec) runs fi_pingpong -p tcp instead, and a plain download beside it: tcp, a
#      fallback, exit 20;
#   c. o-hostpath (/dev/infiniband as a hostPath, no grant: EPERM on open) sends over TCP: tcp, and
#      exit 20 with --expect rdma;
#   d. o-shared-active and o-shared-idle hold device.gpustack.ai/rdma.shared tokens on one device;
#      the active one runs both ends of an RC connection (e2e-verbs-actor loop, no host peer on
#      the device): rdma with sole-owner; the other is idle (exit 21);
#   e. o-idle (no grant, no traffic): idle.
# And the busy, messy node of issue 27, each a case where the verdict used to be wrong:
#   f. o-pd-only holds a third rxe2 token, opens rxe2 with a PD and a CQ but no QP (a stack that failed
#      before its QPs) and sends over TCP while o-shared-active moves RDMA on rxe2: tcp, a fallback
#      (it was rdma), and o-shared-active stays the sole owner (it was shared-ambiguous);
#   g. o-thread-exit (device.gpustack.ai/rdma: 1) creates its PD, CQ, MR and QPs in a thread that
#      exits, then moves RDMA from its main thread, and downloads beside it: the kernel names no
#      owner (pid 0), but each QP names its PD and the PD its device context, which the main thread
#      opened: rdma, its container c, owned.qp counted (issue 32 item 15; it was unknown, and idle
#      before that). Then its writes stop (SIGUSR1: the actor keeps its QPs) while it downloads:
#      tcp, a fallback, its QPs still counted;
#   h. o-thread-stay does the same from a thread that stays: the kernel names the thread, and the
#      evidence must name the process (it named the thread ID);
#   i. o-init: an init container holds the fourth rxe2 token and ends; the app container, with no
#      grant, sends over TCP: the init container is no fallback (it was tcp, fallback true).
# The premise of b. is that o-tcp owns no QP that can move bytes: libfabric 1.17's verbs provider,
# initialized by fi_getinfo in every process whatever provider it asks for, creates per device a PD,
# two CQs and a series of never-connected QPs (RESET) to learn the device's limits, and destroys
# them before fi_getinfo returns; a sample can catch them.
# One rxe device cannot be held exclusively (a, b, g, h) and shared (d, f, i) at once, so the case
# adds rxe1..rxe4 on dummy netdevs: the exclusive pool serves rxe0, rxe1, rxe3 and rxe4, the shared
# pool rxe2 (rxe loops a packet back inside the device when its destination MAC is its own, so one
# device carries both ends).
# Also: rdma-res-probe (the agent's restrack reader as a tool) lists the same user QPs as
# `rdma -j res show qp`.
# e2e: needs the real kubelet
# e2e: timeout 900
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
# shellcheck source=../lib/rk-vm.sh
source "$E2E_LIB/rk-vm.sh"
rkvm_check_parts
for t in ibv_rc_pingpong fi_pingpong rdma; do command -v "$t" >/dev/null || skip "$t not installed"; done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  skip "containernetworking-plugins not installed (run test/e2e/setup.sh)"
# Help output is captured first: both exit non-zero after it, and pipefail would hide a match.
OBSERVE=1
agent_help=$("$AGENT" --helpfull 2>&1) ctl_help=$("$FABRICCTL" --help 2>&1)
[[ $agent_help == *"--observe ("* && $agent_help == *"--sample_period ("* ]] || OBSERVE=0
[[ $ctl_help == *"fabricctl observe "*"--window"* ]] || OBSERVE=0
SHARED=device.gpustack.ai/rdma.shared
WINDOW=15
GW=10.99.0.1

# ---- the node, with a CNI network --------------------------------------------------------------------
rkvm_node /run/rk10
# Two more soft-RoCE devices (removed at exit).
"$E2E_LIB/rxe-up.sh" rxe1 e2e-rxe1 10.0.5.1/24 >>"$OUT/setup.log" 2>&1 || fail "cannot add rxe1 on a dummy netdev"
"$E2E_LIB/rxe-up.sh" rxe2 e2e-rxe2 10.0.6.1/24 >>"$OUT/setup.log" 2>&1 || fail "cannot add rxe2 on a dummy netdev"
"$E2E_LIB/rxe-up.sh" rxe3 e2e-rxe3 10.0.7.1/24 >>"$OUT/setup.log" 2>&1 || fail "cannot add rxe3 on a dummy netdev"
"$E2E_LIB/rxe-up.sh" rxe4 e2e-rxe4 10.0.8.1/24 >>"$OUT/setup.log" 2>&1 || fail "cannot add rxe4 on a dummy netdev"
# `rdma link delete` waits, unkillable, until every process that opened the device's uverbs file has
# closed it; whatever still holds one at exit is killed first.
_e2e_rxe_down() {
  local d u p
  for d in rxe1 rxe2 rxe3 rxe4; do
    for u in /sys/class/infiniband_verbs/uverbs*; do
      [[ $(cat "$u/ibdev" 2>/dev/null) == "$d" ]] || continue
      for p in /proc/[0-9]*; do
        ls -l "$p/fd" 2>/dev/null | grep -q " /dev/infiniband/${u##*/}\$" && kill -KILL "${p#/proc/}" 2>/dev/null
      done
    done
  done
  for d in 1 2 3 4; do
    rdma link delete rxe$d 2>/dev/null; ip link del e2e-rxe$d 2>/dev/null
  done
}
trap '_rkvm_exit; _e2e_rxe_down' EXIT
declare -A GID
for d in rxe0 rxe1 rxe2 rxe3 rxe4; do
  GID[$d]=$(roce_v2_ipv4_gid_index "$d") || fail "$d has no RoCE v2 IPv4 GID"
done
log "GID indexes: $(for d in rxe0 rxe1 rxe2 rxe3 rxe4; do echo -n "$d ${GID[$d]} "; done)"

# The Pods' network.
modprobe bridge 2>/dev/null
cat >"$RK_WORK/10-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e-net",
  "plugins": [
    { "type": "bridge", "bridge": "e2e-cni0", "isGateway": true, "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.99.0.0/24", "gateway": "$GW" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } }
  ]
}
EOF
export RK_CNI_CONFLIST=$RK_WORK/10-e2e.conflist
cat >"$RK_WORK/agent-config.yaml" <<EOF
pools:
  - name: $RES
    mode: exclusive
    selector: {ibdevNames: [rxe0, rxe1, rxe3, rxe4]}
  - name: $SHARED
    mode: shared
    tokensPerDevice: 4
    selector: {ibdevNames: [rxe2]}
EOF
RKVM_METRICS=127.0.0.1:9435
AGENT_URL=http://$RKVM_METRICS
# The agent runs as the chart runs it: uid 0 without any capability (the observation part adds
# only hostPID, which the VM's root PID namespace is). The kernel must still show it the Pods' QPs
# and /proc must give it their cgroups and netns bytes.
# shellcheck disable=SC2034  # read by lib/rk-vm.sh
RKVM_AGENT_PREFIX=(setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --)
obs_flags=()
((OBSERVE)) && obs_flags=(--observe --sample-period 1s)
rkvm_start --config "$RK_WORK/agent-config.yaml" "${obs_flags[@]}"
# sh and setpriv exec the agent: it keeps the background job's PID.
caps=$(awk '/^Cap(Prm|Eff|Bnd):/ { printf "%s%s ", $1, $2 }' "/proc/$AGENT_PID/status")
[[ $(cat "/proc/$AGENT_PID/comm") == fabric-agent &&
   $caps == "CapPrm:0000000000000000 CapEff:0000000000000000 CapBnd:0000000000000000 " ]] ||
  fail "the agent (pid $AGENT_PID, $(cat "/proc/$AGENT_PID/comm")) runs with capabilities: $caps"
wait_for 30 eval 'checkpoint | jq -e --arg r "$SHARED" "(.Data.RegisteredDevices[\$r] // []) | length > 0" >/dev/null 2>&1' ||
  fail "the kubelet's checkpoint lists no $SHARED device"

# ---- the Pods ----------------------------------------------------------------------------------------
# Each client retries until its peer listens; the ping-pongs run longer than the case (-n), the TCP
# senders in rounds of 2.5 MiB each way with a pause (under TCG a busy sender would starve the rest).
gid_of='case $d in rxe0) g='${GID[rxe0]}';; rxe1) g='${GID[rxe1]}';; rxe2) g='${GID[rxe2]}';;
  rxe3) g='${GID[rxe3]}';; rxe4) g='${GID[rxe4]}';; esac'
RDMA_CLIENT='d=${FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA%%,*}; '$gid_of'; echo "device $d gid $g";
  until ibv_rc_pingpong -d $d -g $g -e -s 4096 -n 100000000 -p PORT '$GW'; do sleep 0.5; done'
# Plain TCP: a 2 MiB download every ~2 s from a busybox httpd in the root netns. (busybox's small nc
# sends only the first 1 KiB of a piped stdin, so it cannot be the sender.)
http_client() {
  echo "while :; do /bin/busybox wget -q -O /dev/null http://$GW:47594/z; sleep 2; done"
}
# The TCP fallback of a libfabric stack (b., c.): fi_pingpong -p tcp rounds, whose fi_getinfo also
# runs the verbs provider's probes, and the download beside them. fi_pingpong alone stalled under
# TCG: one run moved 7.9 MB in 42 s, then under 1 KiB in the 16 s window, and the verdict was idle.
tcp_client() {  # PORT
  echo "while :; do fi_pingpong -p tcp -e msg -P $1 -I 20 -S 65536 $GW >/dev/null 2>&1 && echo round; sleep 0.3; done & $(http_client)"
}
limits() { echo "      resources: {limits: {$1: 1}}"; }

# o-rdma first: its server in the root netns runs on the device the kubelet grants it.
rkvm_pod o-rdma "$(limits "$RES")" 0 false "${RDMA_CLIENT//PORT/18515}" | run_static_pod o-rdma
# The kubelet's checkpoint by UID (each pod_uid asks the kubelet's API: slow under TCG, so once).
uid_devices() {  # UID RESOURCE
  checkpoint | jq -r --arg u "$1" --arg r "$2" '.Data.PodDeviceEntries[]? | select(.PodUID == $u and .ResourceName == $r) |
    .DeviceIDs | if type == "object" then [.[][]] else . end | .[]' 2>/dev/null | sort
}
wait_for 120 eval 'uid_rdma=$(pod_uid o-rdma); [[ -n $uid_rdma ]]' || fail "the kubelet does not list o-rdma"
wait_for 60 eval '[[ -n $(uid_devices "$uid_rdma" "$RES") ]]' ||
  fail "o-rdma got no $RES device: $(pod_json o-rdma | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
rdma_dev=$(uid_devices "$uid_rdma" "$RES")
log "o-rdma granted $rdma_dev at $(since)s"
rkvm_pod o-tcp "$(limits "$RES")" 0 false "$(tcp_client 47592)" | run_static_pod o-tcp
rkvm_pod o-hostpath "" 1 false "ibv_devinfo -d rxe0 2>&1 | head -n 3; $(tcp_client 47593)" | run_static_pod o-hostpath
ACTOR=$E2E_TOOLS_DIR/e2e-verbs-actor
[[ -x $ACTOR ]] || fail "e2e-verbs-actor is not built (test/e2e/tools)"
# Both ends in the Pod (created by its main thread, so the kernel names the process), so nothing but
# Pods uses rxe2 (a host peer would make it shared-ambiguous).
SHARED_ACTIVE='d=${FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA_SHARED%%,*}; '$gid_of'; exec '"$ACTOR"' loop $d $g 100000 main'
rkvm_pod o-shared-active "$(limits "$SHARED")" 0 false "$SHARED_ACTIVE" | run_static_pod o-shared-active
rkvm_pod o-shared-idle "$(limits "$SHARED")" 0 false | run_static_pod o-shared-idle
rkvm_pod o-idle "" 0 false | run_static_pod o-idle
# f.-i.: the issue 27 Pods.
PD_ONLY='d=${FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA_SHARED%%,*}; '"$ACTOR"' open $d 100000 & '"$(http_client)"
THREAD_LOOP='d=${FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA%%,*}; '$gid_of'; exec '"$ACTOR"' loop $d $g 100000 WHO'
THREAD_EXIT='d=${FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA%%,*}; '$gid_of'; '"$ACTOR"' loop $d $g 100000 exit & '"$(http_client)"
rkvm_pod o-pd-only "$(limits "$SHARED")" 0 false "$PD_ONLY" | run_static_pod o-pd-only
rkvm_pod o-thread-exit "$(limits "$RES")" 0 false "$THREAD_EXIT" | run_static_pod o-thread-exit
rkvm_pod o-thread-stay "$(limits "$RES")" 0 false "${THREAD_LOOP//WHO/stay}" | run_static_pod o-thread-stay
# o-init: an init container "fetch" holding an rxe2 token that ends at once, then the app container.
with_init_container() {  # NAME RESOURCE: adds it to the manifest on stdin
  awk -v name="$1" -v res="$2" '/^  containers:/ {
      print "  initContainers:"
      print "    - name: " name
      print "      image: docker.io/local/busybox:rk"
      print "      imagePullPolicy: Never"
      print "      command: [\"/bin/sh\", \"-c\", \"echo fetched\"]"
      print "      resources: {limits: {" res ": 1}}"
    } { print }'
}
rkvm_pod o-init "" 0 false "$(http_client)" | with_init_container fetch "$SHARED" | run_static_pod o-init

# The peers, in the root netns.
peer_loop() {  # NAME CMD...: runs CMD again whenever it ends
  start_bg "$1" sh -c 'shift; while :; do "$@"; sleep 0.2; done' peer "$@"
}
peer_loop srv-rdma ibv_rc_pingpong -d "$rdma_dev" -g "${GID[$rdma_dev]}" -e -s 4096 -n 100000000 -p 18515
peer_loop srv-tcp fi_pingpong -p tcp -e msg -B 47592 -I 20 -S 65536
peer_loop srv-hostpath fi_pingpong -p tcp -e msg -B 47593 -I 20 -S 65536
mkdir -p "$OUT/www" && dd if=/dev/zero of="$OUT/www/z" bs=65536 count=32 2>/dev/null
peer_loop srv-http busybox httpd -f -p 47594 -h "$OUT/www"

PODS="o-rdma o-tcp o-hostpath o-shared-active o-shared-idle o-idle o-pd-only o-thread-exit o-thread-stay o-init"
for p in $PODS; do
  wait_container_running "$p" c 400 2>>"$OUT/setup.log" ||
    fail "$p not running: $(pod_json "$p" | jq -c '.status | {phase, reason, message}' 2>/dev/null)"
done
t_running=$(since)
log "all Pods running at ${t_running}s; checkpoint: $(checkpoint | jq -c '[.Data.PodDeviceEntries[]? | {p: .PodUID[0:8], r: .ResourceName, d: .DeviceIDs}]' 2>/dev/null)"

# A Pod's processes (its cgroups under the kubelet's root) and its netns bytes (/proc/PID/net/dev).
declare -A UIDS
for p in $PODS; do  # the kubelet's API answers slowly under TCG: retry
  wait_for 120 eval 'UIDS[$p]=$(pod_uid "$p"); [[ -n ${UIDS[$p]} ]]' || fail "no UID for $p"
done
pod_pids() {
  find "/sys/fs/cgroup/pids/$RK_CGROOT" -path "*/pod${UIDS[$1]}/*" -name cgroup.procs -exec cat {} + 2>/dev/null
}
net_bytes() {  # PID: rx + tx of every interface but lo
  awk -F'[: ]+' 'NR > 2 && $2 != "lo" { s += $3 + $11 } END { print s + 0 }' "/proc/$1/net/dev" 2>/dev/null
}
# The Pod's first process (its pause process, which lives as long as the Pod) reads its netns.
declare -A NETPID
for p in $PODS; do
  NETPID[$p]=$(pod_pids "$p" | sort -n | head -n 1)
  [[ -n ${NETPID[$p]} ]] || fail "no process of $p under /sys/fs/cgroup/pids/$RK_CGROOT"
  [[ $(readlink "/proc/${NETPID[$p]}/ns/net") != "$(readlink /proc/1/ns/net)" ]] ||
    fail "$p shares the root netns (hostNetwork?)"
done
# What the chart's agent (uid 0, no capability, hostPID) can read of a Pod's process: its cgroup
# and its netns bytes must be readable; ns/net needs ptrace access (the caller's capabilities must
# cover the target's), so it is only reported.
nocap() { setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all -- "$@"; }
pp=${NETPID[o-tcp]}
nocap cat "/proc/$pp/cgroup" >/dev/null 2>"$TMP/nocap.err" || fail "no capability: /proc/$pp/cgroup: $(cat "$TMP/nocap.err")"
nocap cat "/proc/$pp/net/dev" >/dev/null 2>"$TMP/nocap.err" || fail "no capability: /proc/$pp/net/dev: $(cat "$TMP/nocap.err")"
nocap_nsnet=$(nocap readlink "/proc/$pp/ns/net" 2>&1)
log "without capabilities: /proc/$pp/cgroup and net/dev readable; readlink ns/net: $nocap_nsnet"
declare -A NET0
for p in $PODS; do NET0[$p]=$(net_bytes "${NETPID[$p]}"); done
t0=$(date +%s.%N)
log "Pod processes: $(for p in $PODS; do echo -n "$p=[$(pod_pids "$p" | sort -n | paste -sd' ')] "; done)"

# Who owns which QP: the kernel's restrack (rdma res show qp) against the Pods' processes.
qp_owners() {  # DEVICE: "pid comm" per user QP on DEVICE
  rdma -j res show qp 2>/dev/null | jq -r --arg d "$1" '.[]? | select(.ifname == $d and .pid != null) | "\(.pid) \(.comm)"'
}
owned_by() {  # POD DEVICE: how many of DEVICE's user QPs a process of POD owns
  local n=0 pid _c pids
  pids=" $(pod_pids "$1" | paste -sd' ') "
  while read -r pid _c; do
    [[ $pids == *" $pid "* ]] && n=$((n + 1))
  done < <(qp_owners "$2")
  echo "$n"
}
wait_for 180 eval '(( $(owned_by o-rdma "$rdma_dev") >= 1 && $(owned_by o-shared-active rxe2) >= 1 ))' || {
  log "o-rdma log: $(pod_logs o-rdma | tail -n 5 | tr '\n' ' ')"
  log "o-shared-active log: $(pod_logs o-shared-active | tail -n 5 | tr '\n' ' ')"
  log "rdma res show qp: $(rdma res show qp | tr '\n' ';')"
  fail "the ping-pong Pods own no QP on their devices after 180 s (o-rdma on $rdma_dev: $(owned_by o-rdma "$rdma_dev"), o-shared-active on rxe2: $(owned_by o-shared-active rxe2))"
}
# g., h.: the actors' QPs, RTS, and who the kernel says owns them: nobody (the creating thread
# exited) and a thread of the actor (not its process), which /proc resolves to the process.
declare -A DEV
for p in o-thread-exit o-thread-stay; do
  DEV[$p]=$(uid_devices "${UIDS[$p]}" "$RES")
  [[ -n ${DEV[$p]} ]] || fail "$p got no $RES device"
done
user_qps() {  # DEVICE: "PID|none STATE" per QP that is not the GSI's
  rdma -j res show qp 2>/dev/null |
    jq -r --arg d "$1" '.[]? | select(.ifname == $d and .type != "GSI") | "\(.pid // "none") \(.state)"'
}
wait_for 120 eval '(( $(user_qps "${DEV[o-thread-exit]}" | grep -c "^none RTS") >= 2 &&
                      $(user_qps "${DEV[o-thread-stay]}" | grep -vc "^none") >= 2 ))' || {
  log "o-thread-exit log: $(pod_logs o-thread-exit | tail -n 3 | tr '\n' ' ')"
  log "o-thread-stay log: $(pod_logs o-thread-stay | tail -n 3 | tr '\n' ' ')"
  fail "the actors have no RTS QPs (${DEV[o-thread-exit]}: $(user_qps "${DEV[o-thread-exit]}" | tr '\n' ';') ${DEV[o-thread-stay]}: $(user_qps "${DEV[o-thread-stay]}" | tr '\n' ';'))"
}
actor_pid=
for pid in $(pod_pids o-thread-stay); do
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == e2e-verbs-actor ]] && actor_pid=$pid
done
stay_tid=$(user_qps "${DEV[o-thread-stay]}" | awk '$2 == "RTS" { print $1; exit }')
[[ -n $actor_pid && -n $stay_tid && $stay_tid != "$actor_pid" &&
   $(awk '/^Tgid:/ { print $2 }' "/proc/$stay_tid/status" 2>/dev/null) == "$actor_pid" ]] ||
  fail "o-thread-stay: the kernel should name a thread ($stay_tid) of the actor process ($actor_pid)"
log "o-thread-stay: the kernel names thread $stay_tid of process $actor_pid; o-thread-exit's QPs: $(user_qps "${DEV[o-thread-exit]}" | tr '\n' ';')"
log "QPs owned at $(since)s: $(rdma res show qp | grep -v '\[ib_core\]' | tr -s ' ' | tr '\n' ';')"
# rdma-res-probe (the agent's restrack reader as a tool) against iproute2: the same user QPs
# (device, QP number, owner PID), read at once while the ping-pongs run.
PROBE=$BUILD/agent/restrack/rdma-res-probe
probe_note="rdma-res-probe not built"
if [[ -x $PROBE ]]; then
  probe_qps=$("$PROBE" qp | jq -r 'select(.kind == "qp" and .pid != null) | "\(.device) \(.id) \(.pid)"' | sort)
  iproute_qps=$(rdma -j res show qp | jq -r '.[]? | select(.pid != null) | "\(.ifname) \(.lqpn) \(.pid)"' | sort)
  [[ -n $probe_qps && $probe_qps == "$iproute_qps" ]] ||
    fail "rdma-res-probe qp and rdma -j res show qp differ: probe [$(echo $probe_qps)] vs iproute2 [$(echo $iproute_qps)]"
  probe_note="rdma-res-probe = rdma res show qp ($(wc -l <<<"$probe_qps") user QPs)"
  log "$probe_note: $(echo $probe_qps)"
fi
hw() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts"; }
PKTS0_RDMA=$(hw "$rdma_dev") PKTS0_SHARED=$(hw rxe2)

# ---- the window ----------------------------------------------------------------------------------
sleep $((WINDOW + 1))
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
declare -A NETD
for p in $PODS; do NETD[$p]=$(( $(net_bytes "${NETPID[$p]}") - ${NET0[$p]} )); done
pkts_rdma=$(( $(hw "$rdma_dev") - PKTS0_RDMA )) pkts_shared=$(( $(hw rxe2) - PKTS0_SHARED ))
log "over ${secs}s: netns bytes $(for p in $PODS; do echo -n "$p=${NETD[$p]} "; done); sent_pkts $rdma_dev +$pkts_rdma, rxe2 +$pkts_shared"
hostpath_open=$(cut -d' ' -f4- "$RK_LOGDIR"/pods/default_o-hostpath-"$RK_NODE"_"${UIDS[o-hostpath]}"/c/*.log 2>/dev/null | head -n 3 | tr '\n' ' ')
log "o-hostpath: $hostpath_open"

if ((OBSERVE)); then
  # ---- the verdicts: fabricctl observe, all at once -----------------------------------------------
  t0=$(date +%s.%N)
  curl -s -m 30 -o "$OUT/v1-pods.json" -w "%{http_code}" "$AGENT_URL/v1/pods?window=${WINDOW}s" >"$TMP/list.code" 2>&1
  log "GET /v1/pods: HTTP $(cat "$TMP/list.code") in $(echo "$(date +%s.%N) - $t0" | bc)s, $(wc -c <"$OUT/v1-pods.json") bytes"
  observe() {  # POD [ARGS...]: writes $TMP/POD[ARGS].json and .rc
    local p=$1 tag=$1; shift
    (($#)) && tag+=$(printf '%s' "$*" | tr -c 'a-z0-9' '_')  # "--expect rdma": __expect_rdma
    timeout 60 "$FABRICCTL" observe --agent "$AGENT_URL" --pod "default/$p-$RK_NODE" --window "${WINDOW}s" -o json "$@" \
      >"$TMP/$tag.json" 2>"$TMP/$tag.err"
    echo $? >"$TMP/$tag.rc"
  }
  # Wait for these calls only: a bare `wait` also waits for the servers and the agent.
  observers=()
  for p in $PODS; do observe "$p" & observers+=($!); done
  observe o-hostpath --expect rdma & observers+=($!)
  wait "${observers[@]}"
  for f in "$TMP"/*.json; do
    log "observe $(basename "$f" .json): exit $(cat "${f%.json}.rc"): $(jq -c . "$f" 2>/dev/null || cat "$f" "${f%.json}.err")"
    cp "$f" "$OUT/"
  done
  doc() { jq -c "$2" "$TMP/$1.json" 2>/dev/null; }  # TAG JQ_FILTER
  rc() { cat "$TMP/$1.rc"; }
  c0='.containers[0]'
  verdict() { doc "$1" "$c0.verdict" | tr -d '"'; }
  # "verdict attribution exit; fabric packets, other bytes, QPs owned on the devices"
  facts() {
    echo "$(verdict "$1")/$(doc "$1" "$c0.attribution" | tr -d '"') exit $(rc "$1"): $(doc "$1" \
      "$c0 | \"pkts \\(.fabric_packets // .fabric_bytes), other \\(.other_bytes), qp \\([.devices[]? | \"\\(.device)=\\(.owned.qp)\"] | join(\",\"))\"" | tr -d '"')"
  }
  expect() {  # WHAT CONDITION...
    local what=$1; shift
    "$@" || fail "$what: $(doc "${TAG:-x}" . | head -c 1500)"
  }
  # a. rdma, its own QPs on the granted device, shared-ambiguous with the host peer named
  TAG=o-rdma
  expect "o-rdma: verdict $(verdict o-rdma), want rdma" test "$(verdict o-rdma)" == rdma
  expect "o-rdma: exit $(rc o-rdma), want 0" test "$(rc o-rdma)" == 0
  expect "o-rdma: attribution, want shared-ambiguous (its peer is a host process on $rdma_dev)" \
    test "$(doc o-rdma "$c0.attribution")" == '"shared-ambiguous"'
  expect "o-rdma: the evidence names the host peer" \
    test "$(doc o-rdma "[$c0.evidence[] | select(test(\"host pid [0-9]+ [(]ibv_rc_pingpong[)] owns 1 QP\"))] | length")" -ge 1
  expect "o-rdma: owned.qp on $rdma_dev, want >= 1" \
    test "$(doc o-rdma "[$c0.devices[]? | select(.device == \"$rdma_dev\") | .owned.qp] | max // 0")" -ge 1
  # b. the same spec over TCP: a fallback
  TAG=o-tcp
  expect "o-tcp: verdict $(verdict o-tcp), want tcp" test "$(verdict o-tcp)" == tcp
  expect "o-tcp: fallback, want true" test "$(doc o-tcp "$c0.fallback")" == true
  expect "o-tcp: exit $(rc o-tcp), want 20" test "$(rc o-tcp)" == 20
  # fi_getinfo's probe QPs (RESET) may show in a sample: no QP that can move bytes.
  expect "o-tcp: owns no QP that can move bytes" test "$(doc o-tcp "[$c0.devices[]?.owned.qp_active] | add // 0")" == 0
  log "o-tcp: QPs seen in the window (fi_getinfo's probes, never connected): $(doc o-tcp "[$c0.devices[]?.owned.qp] | add // 0")"
  # c. /dev/infiniband through a hostPath, no grant (EPERM): tcp; --expect rdma: exit 20
  TAG=o-hostpath
  expect "o-hostpath: verdict $(verdict o-hostpath), want tcp" test "$(verdict o-hostpath)" == tcp
  TAG=o-hostpath__expect_rdma
  expect "o-hostpath --expect rdma: verdict, want tcp" test "$(verdict o-hostpath__expect_rdma)" == tcp
  expect "o-hostpath --expect rdma: exit $(rc o-hostpath__expect_rdma), want 20" test "$(rc o-hostpath__expect_rdma)" == 20
  # d. two rdma.shared holders on rxe2, one active: sole-owner; the other idle (exit 21)
  TAG=o-shared-active
  expect "o-shared-active: verdict $(verdict o-shared-active), want rdma" test "$(verdict o-shared-active)" == rdma
  expect "o-shared-active: attribution, want sole-owner" test "$(doc o-shared-active "$c0.attribution")" == '"sole-owner"'
  expect "o-shared-active: exit $(rc o-shared-active), want 0" test "$(rc o-shared-active)" == 0
  TAG=o-shared-idle
  expect "o-shared-idle: verdict $(verdict o-shared-idle), want idle" test "$(verdict o-shared-idle)" == idle
  expect "o-shared-idle: exit $(rc o-shared-idle), want 21" test "$(rc o-shared-idle)" == 21
  # e. no traffic
  TAG=o-idle
  expect "o-idle: verdict $(verdict o-idle), want idle" test "$(verdict o-idle)" == idle
  expect "o-idle: exit $(rc o-idle), want 21" test "$(rc o-idle)" == 21
  # f. a PD and a CQ on rxe2, no QP, TCP bytes: tcp and a fallback; the active holder stays sole owner
  TAG=o-pd-only
  expect "o-pd-only: verdict $(verdict o-pd-only), want tcp" test "$(verdict o-pd-only)" == tcp
  expect "o-pd-only: fallback, want true" test "$(doc o-pd-only "$c0.fallback")" == true
  expect "o-pd-only: exit $(rc o-pd-only), want 20" test "$(rc o-pd-only)" == 20
  expect "o-pd-only: owns a PD on rxe2" test "$(doc o-pd-only "[$c0.devices[]? | select(.device == \"rxe2\") | .owned.pd] | max // 0")" -ge 1
  expect "o-pd-only: no QP that can move bytes" test "$(doc o-pd-only "[$c0.devices[]?.owned.qp_active] | add // 0")" == 0
  expect "o-pd-only: says it opened the device without a QP" test "$(doc o-pd-only "[$c0.evidence[] | select(test(\"opened rxe2 but created no QP\"))] | length")" -ge 1
  TAG=o-shared-active
  expect "o-shared-active: holders, want itself only" test "$(doc o-shared-active "$c0.devices[0].holders | length")" == 1
  # g. the creating thread exited: the kernel names nobody, the QPs' PD's context names the
  #    process: rdma, its container, its QPs counted
  TAG=o-thread-exit
  expect "o-thread-exit: verdict $(verdict o-thread-exit), want rdma" test "$(verdict o-thread-exit)" == rdma
  expect "o-thread-exit: container, want c" test "$(doc o-thread-exit "$c0.name")" == '"c"'
  expect "o-thread-exit: owned.qp on ${DEV[o-thread-exit]}, want >= 2" \
    test "$(doc o-thread-exit "[$c0.devices[]? | select(.device == \"${DEV[o-thread-exit]}\") | .owned.qp] | max // 0")" -ge 2
  expect "o-thread-exit: the evidence says the QPs' thread has exited" \
    test "$(doc o-thread-exit "[$c0.evidence[] | select(test(\"created by a thread that has exited\"))] | length")" -ge 1
  # h. a thread that stays: the process, not the thread, in the evidence
  TAG=o-thread-stay
  expect "o-thread-stay: verdict $(verdict o-thread-stay), want rdma" test "$(verdict o-thread-stay)" == rdma
  expect "o-thread-stay: attribution, want exclusive" test "$(doc o-thread-stay "$c0.attribution")" == '"exclusive"'
  expect "o-thread-stay: the evidence names the process $actor_pid (the kernel said thread $stay_tid)" \
    test "$(doc o-thread-stay "[$c0.evidence[] | select(test(\"on ${DEV[o-thread-stay]} [(]pid $actor_pid[)]\"))] | length")" == 1
  expect "o-thread-stay: the evidence does not name the thread $stay_tid" \
    test "$(doc o-thread-stay "[$c0.evidence[] | select(test(\"pid $stay_tid[^0-9]\"))] | length")" == 0
  # i. the init container ended: idle, never a fallback, though its Pod moves TCP
  TAG=o-init
  init_c='.containers[] | select(.name == "fetch")'
  expect "o-init: the init container is listed" test "$(doc o-init "[$init_c] | length")" == 1
  expect "o-init: fetch verdict $(doc o-init "$init_c | .verdict"), want idle" test "$(doc o-init "$init_c | .verdict")" == '"idle"'
  expect "o-init: fetch fallback, want false" test "$(doc o-init "$init_c | .fallback")" == false
  expect "o-init: says the container is not running" test "$(doc o-init "[$init_c | .evidence[] | select(test(\"no process of this container is running\"))] | length")" == 1
  metrics=$(curl -s -m 30 "$AGENT_URL/metrics")
  [[ $metrics == *"fabric_pod_transport_fallback{namespace=\"default\",pod=\"o-init-$RK_NODE\",container=\"fetch\"} 0"* ]] ||
    fail "o-init: the fallback gauge of fetch is not 0: $(grep "o-init" <<<"$metrics" | tr '\n' ';')"
  # g, continued. The same QPs stopped (SIGUSR1: the actor keeps them and writes nothing) while the
  # Pod downloads: tcp, a fallback, the QPs still counted.
  exit_actor=
  for pid in $(pod_pids o-thread-exit); do
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == e2e-verbs-actor ]] && exit_actor=$pid
  done
  [[ -n $exit_actor ]] && kill -USR1 "$exit_actor" || fail "o-thread-exit: no e2e-verbs-actor to stop"
  sleep $((WINDOW + 2))
  observe o-thread-exit --expect rdma
  cp "$TMP/o-thread-exit__expect_rdma.json" "$OUT/o-thread-exit-stopped.json" 2>/dev/null
  TAG=o-thread-exit__expect_rdma
  expect "o-thread-exit stopped: verdict $(verdict $TAG), want tcp" test "$(verdict $TAG)" == tcp
  expect "o-thread-exit stopped: fallback, want true" test "$(doc $TAG "$c0.fallback")" == true
  expect "o-thread-exit stopped: exit $(rc $TAG), want 20" test "$(rc $TAG)" == 20
  expect "o-thread-exit stopped: owned.qp on ${DEV[o-thread-exit]}, want >= 2" \
    test "$(doc $TAG "[$c0.devices[]? | select(.device == \"${DEV[o-thread-exit]}\") | .owned.qp] | max // 0")" -ge 2
  pass "a. o-rdma $(facts o-rdma); b. o-tcp $(facts o-tcp), fallback $(doc o-tcp "$c0.fallback"); c. o-hostpath $(facts o-hostpath), --expect rdma exit $(rc o-hostpath__expect_rdma); d. o-shared-active $(facts o-shared-active), o-shared-idle $(facts o-shared-idle); e. o-idle $(facts o-idle); f. o-pd-only $(facts o-pd-only); g. o-thread-exit $(facts o-thread-exit), stopped $(facts o-thread-exit__expect_rdma); h. o-thread-stay $(facts o-thread-stay), evidence "$(doc o-thread-stay "$c0.evidence[0]" | tr -d '"')" (kernel: thread $stay_tid of $actor_pid); i. o-init fetch $(doc o-init "$init_c | .verdict")/fallback $(doc o-init "$init_c | .fallback"); $probe_note; Pods running at ${t_running}s; $(since)s"
fi

# ---- without the observer (the agent has no --observe yet): the facts the verdicts rest on --------
(( $(owned_by o-rdma "$rdma_dev") >= 1 )) || fail "o-rdma owns no QP on $rdma_dev"
((pkts_rdma > 1000)) || fail "$rdma_dev sent only $pkts_rdma packets in ${secs}s"
((NETD[o-tcp] > 1048576)) || fail "o-tcp's netns moved only ${NETD[o-tcp]} bytes in ${secs}s"
(( $(owned_by o-tcp "$rdma_dev") == 0 )) || fail "o-tcp owns QPs"
[[ $hostpath_open == *"Failed to open device"* ]] || fail "o-hostpath opened rxe0: $hostpath_open"
((NETD[o-hostpath] > 1048576)) || fail "o-hostpath's netns moved only ${NETD[o-hostpath]} bytes in ${secs}s"
(( $(owned_by o-shared-idle rxe2) == 0 )) || fail "o-shared-idle owns QPs on rxe2"
((NETD[o-idle] < 65536)) || fail "o-idle's netns moved ${NETD[o-idle]} bytes in ${secs}s"
note "agent without --observe: verdicts not asserted"
pass "facts only: o-rdma owns $(owned_by o-rdma "$rdma_dev") QP(s) on $rdma_dev (+$pkts_rdma pkts), o-tcp netns +${NETD[o-tcp]} B, o-hostpath EPERM + ${NETD[o-hostpath]} B, o-shared-active $(owned_by o-shared-active rxe2) QP(s) on rxe2 (+$pkts_shared pkts), o-idle +${NETD[o-idle]} B; $probe_note; Pods running at ${t_running}s; $(since)s"
