#!/bin/bash
# 04-health: link down on the rxe device's netdev -> the port leaves ACTIVE in
# sysfs (measured), and the agent reports the device Unhealthy; link up ->
# ACTIVE and Healthy again. The agent half is observed through its /metrics
# and skipped until the health feature is there.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
P=/sys/class/infiniband/$IBDEV/ports/1
active() { grep -q ACTIVE "$P/state"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
restore() { ip link set "$NETDEV" up; wait_for 20 active; }

# Agent, if built: health over the metrics endpoint on a fixed loopback port.
agent_health=""
METRICS=127.0.0.1:19464
if [[ -x $AGENT ]] && has_flag "$AGENT" --metrics-address; then
  K=$TMP/kubelet
  mkdir -p "$K/device-plugins"
  start_bg agent "$AGENT" --sysfs-root /sys --dev-root /dev --kubelet-root "$K" \
    --registration kubelet --metrics-address "$METRICS"
  scrape() { curl -fsS "http://$METRICS/metrics" 2>/dev/null || wget -qO- "http://$METRICS/metrics" 2>/dev/null; }
  # A health series for the device: any sample naming rxe0 with "health" in its name.
  health_value() { scrape | grep -E "^[a-z_]*health[a-z_]*\{[^}]*\"$IBDEV\"" | head -n1 | awk '{print $NF}'; }
  health_is() { local v; v=$(health_value); [[ -n $v && ( -z $1 || $v == "$1" ) ]]; }
  if wait_for 30 health_is ""; then
    agent_health=yes
    log "agent health series: $(scrape | grep -E "health.*\"$IBDEV\"" | head -n3 | tr '\n' ' ')"
  fi
fi

check "$IBDEV not ACTIVE at start" active
t0=$(date +%s%N)
ip link set "$NETDEV" down
trap 'restore; _cleanup' EXIT
wait_for 20 bash -c "! grep -q ACTIVE $P/state" || fail "$IBDEV still ACTIVE 20 s after $NETDEV down"
down_ms=$(ms_since "$t0")
log "sysfs: $IBDEV port $(cat "$P/state") after ${down_ms} ms"
agent_down_ms=""
if [[ -n $agent_health ]]; then
  wait_for 30 health_is 0 || fail "agent health for $IBDEV not 0 within 30 s of $NETDEV down"
  agent_down_ms=$(ms_since "$t0")
fi
t1=$(date +%s%N)
ip link set "$NETDEV" up
wait_for 20 active || fail "$IBDEV not ACTIVE 20 s after $NETDEV up"
up_ms=$(ms_since "$t1")
log "sysfs: $IBDEV port $(cat "$P/state") after ${up_ms} ms"
agent_up_ms=""
if [[ -n $agent_health ]]; then
  wait_for 30 health_is 1 || fail "agent health for $IBDEV not 1 within 30 s of $NETDEV up"
  agent_up_ms=$(ms_since "$t1")
fi
# 05 needs the RoCE v2 IPv4 GID back.
wait_for 10 roce_v2_ipv4_gid_index "$IBDEV" >/dev/null || fail "IPv4 GID did not come back after $NETDEV up"
kernel="sysfs down ${down_ms} ms, up ${up_ms} ms"
[[ -n $agent_health ]] || skip "agent health not observable yet (no health series for $IBDEV on /metrics); $kernel"
pass "$kernel; agent Unhealthy after ${agent_down_ms} ms, Healthy after ${agent_up_ms} ms"
