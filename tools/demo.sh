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
cleanup() { [ -n "${AGENT_PID:-}" ] && kill "$AGENT_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
TREE=$ROOT/test/testdata/nodes/$NODE

echo
echo "== the node: $NODE (fake sysfs under $TREE)"
"$BUILD/tools/fabricctl/fabricctl" devices --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" | head -40 || true

echo
echo "== kubelet simulator on $WORK/device-plugins/kubelet.sock, agent registering with it"
"$BUILD/tools/kubelet-sim/kubelet-sim" --root "$WORK" --expect-resources 4 \
  --allocate vpc.amazonaws.com/efa=2 --timeout 30s > "$WORK/sim.out" 2>"$WORK/sim.err" &
SIM_PID=$!
sleep 0.3
"$BUILD/agent/daemon/fabric-agent" --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" \
  --kubelet-root "$WORK" --registration kubelet --metrics-address "127.0.0.1:$PORT" \
  2> "$WORK/agent.log" &
AGENT_PID=$!
if ! wait "$SIM_PID"; then
  echo "demo: the kubelet simulator failed:"; cat "$WORK/sim.err" "$WORK/sim.out"
  echo "--- agent log"; cat "$WORK/agent.log"; exit 1
fi
cat "$WORK/sim.out"

echo
echo "== agent log"
cat "$WORK/agent.log"

if curl -fsS "http://127.0.0.1:$PORT/metrics" > "$WORK/metrics" 2>/dev/null; then
  echo
  echo "== http://127.0.0.1:$PORT/metrics (excerpt)"
  grep -E '^fabric_(resource|device_info|device_health|registration)' "$WORK/metrics" | head -30
  curl -fsS "http://127.0.0.1:$PORT/readyz" && echo
fi
echo
echo "demo: done (the agent is stopped with SIGTERM and removes its sockets)"
