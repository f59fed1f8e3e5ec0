#!/bin/bash
# 04-health: link down on the rxe device's netdev -> the port leaves ACTIVE in
# sysfs and the agent advertises the device Unhealthy in ListAndWatch (seen by
# the kubelet simulator); link up -> ACTIVE, then Healthy after the agent's
# hold-down. Latencies are measured and reported. The agent half is skipped
# while the agent binary has no HealthMonitor (detected by symbol name, so a
# stripped agent binary skips it too).
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
P=/sys/class/infiniband/$IBDEV/ports/1
RES=device.gpustack.ai/rdma
active() { grep -q ACTIVE "$P/state"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

watch_agent=""
if [[ -x $AGENT && -x $KUBELET_SIM ]] && has_flag "$KUBELET_SIM" --serve &&
   grep -qa HealthMonitor "$AGENT"; then  # symbol names: the daemon links the health monitor
  watch_agent=yes
  start_agent_with_sim "$TMP/kubelet" --expect-resources 4 --serve --timeout 90s
  L=$OUT/kubelet-sim.log
  wait_for 100 grep -q 'serving until' "$L" || fail "kubelet-sim never saw 4 resources: $(tail -n 3 "$L" | tr '\n' ' ')"
  [[ $(sim_devices "$L" "$RES") == "$IBDEV Healthy" ]] || fail "$RES not '$IBDEV Healthy' at start: $(sim_devices "$L" "$RES")"
fi
# sim_health_after LINE : the latest advertised health of IBDEV printed after LINE.
sim_health_after() { sim_devices "$L" "$RES" "$1" | awk -v d="$IBDEV" '$1 == d {h = $2} END {print h}'; }
sim_says() { [[ $(sim_health_after "$1") == "$2" ]]; }

check "$IBDEV not ACTIVE at start" active
mark=$(wc -l < "${L:-/dev/null}")
t0=$(date +%s%N)
ip link set "$NETDEV" down
trap 'ip link set "$NETDEV" up; wait_for 20 active; _cleanup' EXIT
wait_for 20 eval '! active' || fail "$IBDEV still ACTIVE 20 s after $NETDEV down"
down_ms=$(ms_since "$t0")
log "sysfs: $IBDEV port '$(cat "$P/state")' after ${down_ms} ms"
if [[ -n $watch_agent ]]; then
  wait_for 30 sim_says "$mark" Unhealthy || fail "ListAndWatch did not report $IBDEV Unhealthy within 30 s of $NETDEV down"
  agent_down_ms=$(ms_since "$t0")
  log "ListAndWatch: $IBDEV Unhealthy after ${agent_down_ms} ms"
fi
mark=$(wc -l < "${L:-/dev/null}")
t1=$(date +%s%N)
ip link set "$NETDEV" up
wait_for 20 active || fail "$IBDEV not ACTIVE 20 s after $NETDEV up"
up_ms=$(ms_since "$t1")
log "sysfs: $IBDEV port '$(cat "$P/state")' after ${up_ms} ms"
if [[ -n $watch_agent ]]; then
  wait_for 30 sim_says "$mark" Healthy || fail "ListAndWatch did not report $IBDEV Healthy within 30 s of $NETDEV up"
  agent_up_ms=$(ms_since "$t1")
  log "ListAndWatch: $IBDEV Healthy after ${agent_up_ms} ms"
fi
# 05 needs the RoCE v2 IPv4 GID back.
wait_for 10 roce_v2_ipv4_gid_index "$IBDEV" >/dev/null || fail "IPv4 GID did not come back after $NETDEV up"
kernel="sysfs DOWN after ${down_ms} ms, ACTIVE after ${up_ms} ms"
[[ -n $watch_agent ]] || skip "agent health not wired yet (daemon runs no HealthMonitor / no kubelet-sim --serve); $kernel"
pass "Unhealthy after ${agent_down_ms} ms, Healthy after ${agent_up_ms} ms; $kernel"
