#!/usr/bin/env bash
# What --pod-conditions costs in RSS after heavy API traffic (issue 31 step 2):
# two fabric-agent processes side by side on the p5.48xlarge tree, the same
# fake PodResources (16 Pods, one EFA each), one with --observe and one with
# --observe --pod-conditions against tools/fake-apiserver over HTTPS. For
# MINUTES (default 10) a driver puts many hours of a busy node's API traffic
# through the second one's Pod watch and condition writer:
#   - every Pod's labels patched every 0.5 s (MODIFIED watch events, ~2 KiB each),
#   - every 20 s all 16 Pods deleted and created again (DELETED/ADDED; the agent
#     patches each new Pod's conditions and records Events),
#   - every 30 s the open watches closed by the server (the agent resumes them),
#   - a bookmark every 0.2 s.
# Then VmRSS, VmHWM, RssAnon and RssFile of both, and the agent's requests.
#
#   tools/bench/pod_conditions_rss.sh BUILD_DIR [MINUTES]
# BUILD_DIR holds agent/daemon/fabric-agent and tools/fake-podresources/fake-podresources.
set -euo pipefail
build=$(cd "${1:?usage: pod_conditions_rss.sh BUILD_DIR [MINUTES]}" && pwd)
minutes=${2:-10}
repo=$(cd "$(dirname "$0")/../.." && pwd)
agent=$build/agent/daemon/fabric-agent
fake_pr=$build/tools/fake-podresources/fake-podresources
node=$repo/test/testdata/nodes/p5.48xlarge
for f in "$agent" "$fake_pr"; do [[ -x $f ]] || { echo "missing $f" >&2; exit 2; }; done
for t in python3 openssl; do command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }; done

w=$(mktemp -d /tmp/pc-rss.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$w"
}
trap cleanup EXIT

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=fake-apiserver \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$w/server.key" -out "$w/server.crt" 2>/dev/null
cat >"$w/tokens.json" <<'JSON'
{"tokens": {"admin": {"user": "admin", "role": "admin"},
            "agent-a": {"user": "system:serviceaccount:fabric-system:fabric-device-plugin",
                        "role": "agent", "nodeName": "node-a"}}}
JSON
echo agent-a >"$w/agent-token"
python3 "$repo/tools/fake-apiserver/fake_apiserver.py" --port 0 --port-file "$w/port" \
  --cert "$w/server.crt" --key "$w/server.key" --tokens "$w/tokens.json" \
  --bookmark-interval 0.2 >"$w/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s $w/port ]] && break; sleep 0.1; done
api="https://127.0.0.1:$(cat "$w/port")"

mapfile -t devices < <(ls "$node/sys/class/infiniband" | head -16)
pods=()
for i in "${!devices[@]}"; do pods+=("default/p$i=vpc.amazonaws.com/efa:${devices[$i]}"); done
"$fake_pr" "$w/pr.sock" "${pods[@]}" >"$w/podresources.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S $w/pr.sock ]] && break; sleep 0.1; done

# The admin's side: the Pods (shaped as the kubelet reports running ones,
# with the readiness gate), the traffic, and the request log at the end.
cat >"$w/traffic.py" <<'PY'
import collections, json, ssl, sys, time, urllib.error, urllib.request
api, ca, mode = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
def call(method, path, body=None, ctype="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(api + path, data, {"Authorization": "Bearer admin", "Content-Type": ctype},
                                 method=method)
    try:
        return urllib.request.urlopen(req, context=ctx).read()
    except urllib.error.HTTPError as e:
        return e.read()
def pod(i):
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d" % i, "namespace": "default"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "main"}],
                     "readinessGates": [{"conditionType": "fabric.gpustack.ai/FabricAttached"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                       "containerStatuses": [{"name": "main", "containerID": "containerd://c%d" % i,
                                              "restartCount": 0, "state": {"running": {"startedAt": started}}}]}}
if mode == "create":
    for i in range(16):
        call("POST", "/api/v1/namespaces/default/pods", pod(i))
elif mode == "log":
    log = json.loads(call("GET", "/fake/log"))["requests"]
    agent = collections.Counter("%s %s" % (r["method"], "watch" if "watch" in r["query"] else r["path"].split("/")[-1])
                                for r in log if r["user"] and "fabric-device-plugin" in r["user"])
    print("the agent's requests among the last %d logged: %s" % (len(log), dict(agent)))
else:
    minutes = float(sys.argv[4])
    end = time.time() + minutes * 60
    tick = patches = recreations = closes = 0
    next_recreate, next_close = time.time() + 20, time.time() + 30
    while time.time() < end:
        tick += 1
        for i in range(16):
            call("PATCH", "/api/v1/namespaces/default/pods/p%d" % i,
                 {"metadata": {"labels": {"tick": str(tick)}, "annotations": {"pad": "x" * 1024}}},
                 "application/merge-patch+json")
            patches += 1
        if time.time() >= next_recreate:
            for i in range(16):
                call("DELETE", "/api/v1/namespaces/default/pods/p%d" % i)
                call("POST", "/api/v1/namespaces/default/pods", pod(i))
            recreations += 16
            next_recreate += 20
        if time.time() >= next_close:
            call("POST", "/fake/close-watches")
            closes += 1
            next_close += 30
        time.sleep(0.5)
    print("traffic: %d Pod patches (MODIFIED events), %d Pod re-creations, %d watches closed, over %.0f min"
          % (patches, recreations, closes, minutes))
PY
python3 "$w/traffic.py" "$api" "$w/server.crt" create

start_agent() {  # NAME PORT [FLAGS...]: the agent's PID in $started
  local name=$1 port=$2
  shift 2
  mkdir -p "$w/$name/device-plugins" "$w/$name/plugins_registry"
  "$agent" --sysfs-root="$node/sys" --dev-root="$node/dev" --kubelet-root="$w/$name" \
    --registration=watcher --pod-resources-socket="$w/pr.sock" --write-cdi=false \
    --cdi-dir="$w/$name/cdi" --state-dir="$w/$name/state" --metrics-address="127.0.0.1:$port" \
    --observe "$@" >"$w/$name.log" 2>&1 &
  started=$!
  pids+=("$started")
}
start_agent plain 19435
plain=$started
start_agent conditions 19436 --pod-conditions --node-name=node-a \
  --kube-api-server="$api" --kube-token-file="$w/agent-token" --kube-ca-file="$w/server.crt"
conditions=$started
sleep 5
python3 "$w/traffic.py" "$api" "$w/server.crt" drive "$minutes"
sleep 5

rss() {  # PID: the status lines that matter
  awk '/^(VmRSS|VmHWM|RssAnon|RssFile|Threads):/ {printf "%s %s %s  ", $1, $2, $3} END {print ""}' \
    "/proc/$1/status"
}
echo "fabric-agent --observe:                  $(rss "$plain")"
echo "fabric-agent --observe --pod-conditions: $(rss "$conditions")"
python3 "$w/traffic.py" "$api" "$w/server.crt" log
echo "the agent's conditions metrics: $(python3 -c 'import urllib.request; print(" ".join(l for l in urllib.request.urlopen("http://127.0.0.1:19436/metrics").read().decode().splitlines() if l.startswith("fabric_pod_")))')"
a=$(awk '/^VmRSS/ {print $2}' "/proc/$plain/status")
b=$(awk '/^VmRSS/ {print $2}' "/proc/$conditions/status")
echo "difference: $((b - a)) kB ($(awk -v d=$((b - a)) 'BEGIN {printf "%.2f", d / 1024}') MiB)"
