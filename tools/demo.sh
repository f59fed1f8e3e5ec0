#!/usr/bin/env bash
# The README's first command: installs what is needed, builds, and runs the
# agent on the bundled p5.48xlarge sample node (32 EFA devices on 2 NUMA nodes,
# a fake sysfs tree) against the bundled kubelet simulator, showing
# registration, the device lists, one allocation and the metrics endpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NODE=${NODE:-p5.48xlarge}
BUILD=${BUILD:-$ROOT/build}
tools/install-deps.sh build
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" --target fabric-agent kubelet-sim fabricctl -j"$(nproc)"

WORK=$(mktemp -d /tmp/fabric-demo.XXXXXX)
PORT=${PORT:-9435}
cleanup() {
  for p in ${AGENT_PID:-} ${SIM_PID:-}; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
TREE=$ROOT/test/testdata/nodes/$NODE

echo
echo "== the node: $NODE (fake sysfs under $TREE)"
"$BUILD/tools/fabricctl/fabricctl" devices --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" || true

echo
echo "== kubelet simulator on $WORK/device-plugins/kubelet.sock, agent registering with it"
"$BUILD/tools/kubelet-sim/kubelet-sim" --root "$WORK" --expect-resources 4 \
  --allocate vpc.amazonaws.com/efa=2 --timeout 30s --serve > "$WORK/sim.out" 2>"$WORK/sim.err" &
SIM_PID=$!
sleep 0.3
mkdir -p "$WORK/cdi"
"$BUILD/agent/daemon/fabric-agent" --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" \
  --kubelet-root "$WORK" --device-plugin-dir "$WORK/device-plugins" --registration kubelet --metrics-address "127.0.0.1:$PORT" \
  --cdi-dir "$WORK/cdi" --state-dir "$WORK/state" 2> "$WORK/agent.log" &
AGENT_PID=$!
# The simulator prints its report, then keeps serving (so the agent stays registered).
for _ in $(seq 300); do
  grep -q 'serving until' "$WORK/sim.out" 2>/dev/null && break
  kill -0 "$SIM_PID" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q 'serving until' "$WORK/sim.out"; then
  echo "demo: the kubelet simulator failed:"; cat "$WORK/sim.err" "$WORK/sim.out"
  echo "--- agent log"; cat "$WORK/agent.log"; exit 1
fi
sed '/serving until/d' "$WORK/sim.out"

echo
echo "== agent log"
cat "$WORK/agent.log"

echo
echo "== http://127.0.0.1:$PORT/metrics (excerpt; every device, port and hw counter is there)"
curl -fsS "http://127.0.0.1:$PORT/metrics" > "$WORK/metrics"
grep -E '^fabric_(resource_|allocate_requests_total|kubelet_restarts)' "$WORK/metrics"
grep -E '^fabric_device_(info|healthy)\{device="rdmap79s0"' "$WORK/metrics"
grep -E '^fabric_hw_stat_total\{device="rdmap79s0"' "$WORK/metrics" | head -5
echo "... $(grep -vc '^#' "$WORK/metrics") samples in all"
echo
echo "== http://127.0.0.1:$PORT/readyz: $(curl -sS "http://127.0.0.1:$PORT/readyz")"
echo "== CDI spec written for the runtime: $(ls "$WORK/cdi")"
echo
echo "demo: done (the agent is stopped with SIGTERM and removes its sockets)"
