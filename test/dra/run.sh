#!/usr/bin/env bash
# fabric-dra end to end, against stand-ins of both peers (docs/dra.md, "Testing"):
# tools/fake-apiserver over HTTPS (resource.k8s.io/v1, the driver's RBAC and the
# own-node admission policy) and kubelet-sim --mode dra (the kubelet's DRA
# manager and plugin watcher over the real protos), on the bundled p5.48xlarge
# sysfs tree. It checks, in order:
#   1. the node's ResourceSlices: 32 EFA + 64 tokens of a shared pool on the same
#      devices, pcieRoot/numaNode attributes from the tree, node-bound; deleted
#      as the kubelet does at its start, they are published again at once;
#   2. an allocated claim of one token withdraws that EFA's exclusive device from
#      the slices (the exclusive/shared rule through the ResourceClaim watch);
#   3. NodePrepareResources of that claim answers the CDI name, whose spec grants
#      the device's uverbs node; a second claim the scheduler gave the whole
#      device (the race between two syncs) is refused, naming the holder;
#   4. /v1/node, /metrics and `fabricctl devices --agent` show the DRA state;
#   5. restarted, fabric-dra answers the same prepare from its checkpoint; a
#      device the device-plugin mode granted (kubelet checkpoint) is not published
#      in any pool until that grant ends;
#   6. fabric-agent on the same node waits, naming fabric-dra (one front per node).
# Usage: test/dra/run.sh BUILD_DIR
set -uo pipefail
BUILD=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DRA=$BUILD/agent/daemon/fabric-dra
AGENT=$BUILD/agent/daemon/fabric-agent
SIM=$BUILD/tools/kubelet-sim/kubelet-sim
CTL=$BUILD/tools/fabricctl/fabricctl
FAKE=$REPO/tools/fake-apiserver/fake_apiserver.py
TREE=$REPO/test/testdata/nodes/p5.48xlarge
for x in "$DRA" "$AGENT" "$SIM" "$CTL"; do [[ -x $x ]] || { echo "dra: FAIL: $x not built"; exit 1; }; done
for t in python3 openssl curl jq; do
  command -v "$t" >/dev/null || { echo "dra: skip: $t not installed (tools/install-deps.sh test)"; exit 0; }
done
W=$(mktemp -d /tmp/dra-e2e.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [[ -n ${KEEP:-} ]] || rm -rf "$W"
}
trap cleanup EXIT
fails=0
log() { echo "[$(date +%T.%N | cut -c1-12)] $*"; }
ok() { log "ok: $*"; }
bad() { log "FAIL: $*"; fails=$((fails + 1)); }
wait_for() {  # SECONDS CMD...
  local end=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < end)) || return 1; sleep 0.2; done
}

# ---- the API server stand-in -------------------------------------------------------------------
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fake-apiserver \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$W/server.key" -out "$W/server.crt" 2>/dev/null ||
  { echo "dra: FAIL: openssl could not make a certificate"; exit 1; }
echo -n node-a-token >"$W/token"
cat >"$W/tokens.json" <<J
{"tokens": {"admin-token": {"user": "kubernetes-admin", "role": "admin"},
            "node-a-token": {"user": "system:serviceaccount:fabric:fabric-dra", "nodeName": "node-a"}}}
J
python3 "$FAKE" --cert "$W/server.crt" --key "$W/server.key" --tokens "$W/tokens.json" \
  --port-file "$W/port" --bookmark-interval 1 >"$W/apiserver.log" 2>&1 &
pids+=($!)
wait_for 20 test -s "$W/port" || { echo "dra: FAIL: fake-apiserver did not start: $(tail -3 "$W/apiserver.log")"; exit 1; }
API=https://127.0.0.1:$(cat "$W/port")
api() { curl -sS --cacert "$W/server.crt" -H "Authorization: Bearer admin-token" "$@"; }
slices() { api "$API/apis/resource.k8s.io/v1/resourceslices"; }

# ---- the kubelet's folders, and fabric-dra ----------------------------------------------------------
K=$W/kubelet
mkdir -p "$K/plugins_registry" "$K/plugins" "$W/cdi" "$W/state"
cat >"$W/config.yaml" <<Y
pools:
  - name: vpc.amazonaws.com/efa
    mode: exclusive
    selector: {kinds: [efa]}
  - name: device.gpustack.ai/efa.shared
    mode: shared
    tokensPerDevice: 2
    selector: {kinds: [efa]}
Y
start_dra() {
  "$DRA" --node-name node-a --kube-api-server "$API" --kube-token-file "$W/token" \
    --kube-ca-file "$W/server.crt" --config "$W/config.yaml" --sysfs-root "$TREE/sys" \
    --dev-root "$TREE/dev" --kubelet-root "$K" --device-plugin-dir "$K/device-plugins" \
    --state-dir "$W/state" --cdi-dir "$W/cdi" \
    --memlock-hook-path "" --metrics-address 127.0.0.1:0 --sample-period 1s >>"$W/dra.log" 2>&1 &
  DRA_PID=$!
  pids+=($DRA_PID)
}
start_dra
# The kubelet's DRA manager: registers the plugin when it appears, prepares on demand.
sim() { timeout 60 "$SIM" --root "$K" --mode dra "$@"; }

# ---- 1. the slices -----------------------------------------------------------------------------
have_slices() { [[ $(slices | jq '[.items[] | select(.spec.nodeName == "node-a") | .spec.devices | length] | add // 0') == 96 ]]; }
if wait_for 30 have_slices; then
  s=$(slices)
  roots=$(jq -r '[.items[].spec.devices[] | select(.attributes.mode.string == "exclusive") |
      .attributes["resource.kubernetes.io/pcieRoot"].string] | unique | length' <<<"$s")
  dev0=$(jq -r '[.items[].spec.devices[] | select(.attributes.mode.string == "exclusive")][0]' <<<"$s")
  ibdev0=$(jq -r '.attributes.rdmaDevice.string' <<<"$dev0")
  want_root=$(readlink -f "$TREE/sys/class/infiniband/$ibdev0/device" | grep -o 'pci[0-9a-f]\{4\}:[0-9a-f]\{2\}' | head -1)
  got_root=$(jq -r '.attributes["resource.kubernetes.io/pcieRoot"].string' <<<"$dev0")
  want_numa=$(cat "$TREE/sys/class/infiniband/$ibdev0/device/numa_node")
  got_numa=$(jq -r '.attributes.numaNode.int' <<<"$dev0")
  if [[ $got_root == "$want_root" && $got_numa == "$want_numa" && $roots -gt 1 ]]; then
    ok "96 devices in $(jq '.items | length' <<<"$s") slice(s); $ibdev0 pcieRoot $got_root numaNode $got_numa; $roots roots"
  else
    bad "attributes of $ibdev0: pcieRoot $got_root (want $want_root), numaNode $got_numa (want $want_numa), $roots roots"
  fi
else
  bad "no 96 devices of node-a in the slices after 30 s: $(slices | head -c 400); $(tail -5 "$W/dra.log")"
fi

# ---- 1b. the kubelet's start-up wipe ---------------------------------------------------------------
# kubelet v1.34 deletes every ResourceSlice of its node when it starts (and 30 s
# after a driver goes away), and relies on the driver to publish again at once;
# the agent's watch on its own slices does (the periodic resync alone took 60 s).
api -X DELETE "$API/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a" >/dev/null
wiped_at=$SECONDS
if wait_for 5 have_slices; then
  ok "the node's slices deleted as the kubelet does at start-up: published again in $((SECONDS - wiped_at)) s or less"
else
  bad "slices not published again within 5 s of the kubelet's wipe: $(slices | jq -c '[.items[].metadata.name]')"
fi

# A deleter that keeps going (the garbage collector with a stale owner, another
# writer) is answered ever more slowly: one immediate repair, then 0.5 s doubling.
created() { grep -c "ResourceSlices of pool node-a: .*(1 created" "$W/dra.log"; }
before=$(created)
end=$((SECONDS + 6))
while ((SECONDS < end)); do
  api -X DELETE "$API/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dnode-a" >/dev/null
  sleep 0.1
done
repairs=$(($(created) - before))
if ((repairs >= 2 && repairs <= 8)) && wait_for 40 have_slices; then
  ok "6 s of a deleter every 0.1 s: $repairs repairs (backing off), and the slices are back after it stops"
else
  bad "6 s of a deleter every 0.1 s: $repairs repairs (want 2..8, then the slices back): $(grep -c 'again' "$W/dra.log") backoff lines"
fi

# ---- 2. a claim of one token withdraws the whole device ------------------------------------------
ex_name=$(slices | jq -r --arg d "${ibdev0:-x}" '.items[].spec.devices[] | select(.attributes.rdmaDevice.string == $d and .attributes.mode.string == "exclusive") | .name')
tok_name=$(slices | jq -r --arg d "${ibdev0:-x}" '[.items[].spec.devices[] | select(.attributes.rdmaDevice.string == $d and .attributes.mode.string == "shared") | .name][0]')
# The API server assigns the claim's UID, which the kubelet then names: UID_<NAME>.
declare -A UID_OF
claim() {  # NAME DEVICE POD
  api -X POST -H 'Content-Type: application/json' "$API/fake/claims" -d "$(jq -cn --arg n "$1" --arg d "$2" --arg p "$3" '{
    apiVersion: "resource.k8s.io/v1", kind: "ResourceClaim",
    metadata: {name: $n, namespace: "team"},
    spec: {devices: {requests: [{name: "r", exactly: {deviceClassName: "x"}}]}},
    status: {allocation: {devices: {results: [{request: "r", driver: "fabric.gpustack.ai", pool: "node-a", device: $d}]}},
             reservedFor: [{resource: "pods", name: $p, uid: ($p + "-uid")}]}}')" >/dev/null
  UID_OF[$1]=$(api "$API/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/$1" | jq -r .metadata.uid)
}
claim shared-one "$tok_name" pod-s
gone() { [[ -z $(slices | jq -r --arg n "$ex_name" '.items[].spec.devices[] | select(.name == $n) | .name') ]]; }
if [[ -n $ex_name && -n $tok_name ]] && wait_for 20 gone; then
  ok "token $tok_name allocated: the exclusive $ex_name left the slices"
else
  bad "exclusive $ex_name still published after token $tok_name was allocated"
fi

# ---- 3. prepare, and the refused race ----------------------------------------------------------------
out=$(sim --prepare "team/shared-one/${UID_OF[shared-one]}" 2>&1)
cdi=$(grep -o 'device.gpustack.ai/efa_shared=[a-z0-9]*' <<<"$out" | head -1)
spec=$(grep -l "\"name\": \"$ibdev0\"" "$W"/cdi/*.json 2>/dev/null | head -1)
uverbs=$(basename "$(readlink -f "$TREE/sys/class/infiniband/$ibdev0/device/infiniband_verbs/"*)")
if [[ $cdi == "device.gpustack.ai/efa_shared=$ibdev0" && -n $spec ]] && grep -q "/dev/infiniband/$uverbs\"" "$spec"; then
  ok "prepared shared-one: $cdi; $(basename "$spec") grants /dev/infiniband/$uverbs"
else
  bad "prepare of shared-one: '$cdi' (want device.gpustack.ai/efa_shared=$ibdev0), spec '$spec': $out"
fi
claim whole-one "$ex_name" pod-w
out=$(sim --prepare "team/whole-one/${UID_OF[whole-one]}" 2>&1); rc=$?
if ((rc != 0)) && grep -q "$ibdev0" <<<"$out" && grep -qi "held\|shared" <<<"$out"; then
  ok "whole-one (the whole $ibdev0, allocated in the race) refused: $(grep -o 'NodePrepareResources failed[^"]*' <<<"$out" | head -1 | cut -c1-160)"
else
  bad "whole-one was not refused (rc $rc): $out"
fi

# ---- 4. the DRA state in /v1/node and /metrics ------------------------------------------------------
port=$(grep -o 'on 127.0.0.1:[0-9]*' "$W/dra.log" | head -1 | cut -d: -f2)
node=$(curl -sf "http://127.0.0.1:$port/v1/node")
m=$(curl -sf "http://127.0.0.1:$port/metrics")
if [[ $(jq -r '.dra.registered, .dra.slices.devices, .dra.claims.prepared, .dra.prepare.errors' <<<"$node" | paste -sd' ') == "true 93 1 1" ]] &&
   grep -q '^fabric_dra_prepare_calls_total 2$' <<<"$m" && grep -q '^fabric_dra_claims_allocated 2$' <<<"$m"; then
  ok "/v1/node .dra: registered, 93 devices published (the token claim withdrew rdmap79s0 whole, the race claim its 2 tokens), 1 prepared, 1 error; /metrics fabric_dra_* agree"
else
  bad "/v1/node .dra: $(jq -c .dra <<<"$node"); metrics: $(grep '^fabric_dra' <<<"$m" | paste -sd' ')"
fi

ctl=$("$CTL" devices --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" \
  --config "$W/config.yaml" --agent "127.0.0.1:$port" 2>&1)
if grep -q "DRA driver fabric.gpustack.ai (pool node-a): registered; 1 ResourceSlice(s), 93 device(s)" <<<"$ctl" &&
   grep -q "claims: 2 allocated here, 1 prepared; prepare: 2 call(s), 1 error(s)" <<<"$ctl"; then
  ok "fabricctl devices --agent shows the same DRA state"
else
  bad "fabricctl devices --agent: $(tail -5 <<<"$ctl")"
fi

# ---- 5. restart: the checkpoint answers ----------------------------------------------------------------
kill "$DRA_PID"; wait "$DRA_PID" 2>/dev/null
start_dra
out=$(sim --prepare "team/shared-one/${UID_OF[shared-one]}" 2>&1)
if grep -qF "device.gpustack.ai/efa_shared=$ibdev0" <<<"$out"; then
  ok "after a restart, shared-one prepared again with the same CDI name"
else
  bad "after a restart: $out; $(tail -5 "$W/dra.log")"
fi

# ---- 5b. a node that ran the device-plugin agent -----------------------------------------------------
# Its grants stay in the kubelet's device-manager checkpoint (and PodResources)
# until their Pods end; the scheduler cannot see them, so fabric-dra publishes
# no unit of such a device, in any pool, until then.
legacy=$(slices | jq -r --arg d "${ibdev0:-x}" '[.items[].spec.devices[] | select(.attributes.mode.string == "exclusive" and .attributes.rdmaDevice.string != $d) | .attributes.rdmaDevice.string][0]')
mkdir -p "$K/device-plugins"
checkpoint() {  # DEVICE... (none: no grant)
  jq -cn --args '{Data: {PodDeviceEntries: (if $ARGS.positional == [] then [] else [{PodUID: "dp-pod-uid",
      ContainerName: "member", ResourceName: "vpc.amazonaws.com/efa", DeviceIDs: {"0": $ARGS.positional},
      AllocResp: "CgA="}] end), RegisteredDevices: {}}, Checksum: 0}' "$@" \
    >"$K/device-plugins/kubelet_internal_checkpoint"
}
units_of() { slices | jq --arg d "$1" '[.items[].spec.devices[] | select(.attributes.rdmaDevice.string == $d)] | length'; }
kill "$DRA_PID"; wait "$DRA_PID" 2>/dev/null
checkpoint "$legacy"
start_dra
if [[ $legacy != null ]] && wait_for 20 eval '[[ $(units_of "$legacy") == 0 && $(slices | jq "[.items[].spec.devices[]] | length") -gt 80 ]]'; then
  ok "a device-plugin grant of $legacy (kubelet checkpoint): none of its 3 units published"
else
  bad "device-plugin grant of $legacy: $(units_of "$legacy") of its units still published; $(grep -i 'device-plugin' "$W/dra.log" | tail -2)"
fi
checkpoint
if wait_for 20 eval '[[ $(units_of "$legacy") == 3 ]]'; then
  ok "the grant's Pod gone from the checkpoint: $legacy published again (exclusive + 2 tokens)"
else
  bad "$legacy not published again after its grant ended: $(units_of "$legacy") unit(s)"
fi

# ---- 6. one front per node --------------------------------------------------------------------------
"$AGENT" --config "$W/config.yaml" --sysfs-root "$TREE/sys" --dev-root "$TREE/dev" --kubelet-root "$K" \
  --device-plugin-dir "$K/device-plugins" --state-dir "$W/state-dp" --cdi-dir "$W/cdi-dp" \
  --memlock-hook-path "" >"$W/agent.log" 2>&1 &
pids+=($!)
if wait_for 10 grep -q "waiting: another agent serves this node's devices.*$DRA_PID dra" "$W/agent.log" &&
   ! grep -q "registered with the kubelet\|serving on" "$W/agent.log"; then
  ok "fabric-agent on the same node waits: $(grep -o 'waiting: .*' "$W/agent.log" | head -1 | cut -c1-140)"
else
  bad "fabric-agent did not wait for fabric-dra: $(head -5 "$W/agent.log")"
fi

if ((fails)); then
  echo "---- dra.log (tail) ----"; tail -30 "$W/dra.log"
  echo "dra: FAILED ($fails)"; exit 1
fi
echo "dra: PASS"
