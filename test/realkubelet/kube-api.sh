# shellcheck shell=bash
# test/realkubelet/kube-api.sh: a real control plane for the real kubelet (issue 25): Debian's etcd
# 3.4 and kube-apiserver v1.20.2 (build-apiserver.sh, cached), with Node,RBAC authorization, token
# authentication and service-account signing keys, and the kubelet registered as a Node through a
# kubeconfig. lib.sh sources this file; run.sh (and test/e2e/lib/rk-vm.sh) start the plane.
# No scheduler and no controller-manager: Pods are created with spec.nodeName set, and the
# ServiceAccounts the controller-manager would create (`default` in each namespace) are created here.
# Everything talks to the API server from inside the node's namespace (in_ns), with curl and jq.
#
# Starting and stopping (start_cluster does both when RK_CONTROL_PLANE=1):
#   api_check_parts          print one reason and return 1 when etcd or kube-apiserver cannot be had.
#   start_control_plane      keys, certificates, tokens and kubeconfigs in RK_API_DIR, then etcd (data
#                            on the node's tmpfs /var/lib/rk-etcd) and kube-apiserver; waits for /readyz.
#                            Sets RK_REGISTERED=1 (start_kubelet then registers) and RK_CP_SECS.
#   stop_control_plane       kube-apiserver, then etcd.
#   Env: RK_APISERVER_BIN (default build-apiserver.sh's cache), RK_API_PORT (16443), RK_ETCD_PORT
#   (23790 and the next port for peers), RK_API_HOST (address the kubelet and clients dial, default
#   127.0.0.1), RK_API_BIND (default 0.0.0.0: the node's namespace is private), RK_ETCD_DATA (default
#   /var/lib/rk-etcd, on the node's tmpfs). The serving certificate names RK_API_HOST, RK_NODE_IP
#   (the advertised address), 127.0.0.1 and the kubernetes Service (10.96.0.1, kubernetes.default.svc).
#   Sets RK_API (https://HOST:PORT), RK_API_DIR (ca.crt, admin.kubeconfig, kubelet.kubeconfig, ...),
#   RK_ADMIN_TOKEN (user admin, group system:masters). The kubelet's token is system:node:$RK_NODE
#   in group system:nodes, which the Node authorizer and the NodeRestriction admission plugin accept.
#
# Talking to the API (every call runs curl inside the node's namespace):
#   api [-t TOKEN] METHOD PATH [BODY]     print the response body; exit 0 on 2xx. BODY: JSON or YAML
#                            text, or @FILE. PATCH bodies are strategic merge patches (-m: merge patch).
#   api_code [-t TOKEN] METHOD PATH [BODY]  the same, printing only the HTTP status code.
#   api_namespace NS         create namespace NS (once) and its `default` ServiceAccount, which does
#                            not mount a token (no tokens controller runs).
#   api_sa NS NAME           create ServiceAccount NAME (no token mount).
#   api_clusterrole NAME RULES_JSON / api_role NS NAME RULES_JSON
#                            RULES_JSON e.g. '[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]'
#   api_bind NS NAME ROLE_KIND ROLE SA_NS SA   a RoleBinding (NS set) or ClusterRoleBinding (NS "")
#                            of ServiceAccount SA_NS/SA to ROLE_KIND (Role|ClusterRole) ROLE.
#   sa_token NS SA [SECONDS] [AUDIENCE]  print a token from the TokenRequest API (default 3600 s,
#                            the API server's audience).
#   token_review [-t REVIEWER] TOKEN [AUDIENCE]   print the TokenReview's status (made as admin, or
#                            as REVIEWER: a token allowed to create tokenreviews, system:auth-delegator).
#   access_review [-t REVIEWER] USER GROUPS_CSV VERB RESOURCE NS [SUBRESOURCE] [NAME]   print the
#                            SubjectAccessReview's status ({allowed, denied, reason}), as admin or REVIEWER.
#   api_whoami TOKEN         print "user groups..." the API server authenticates TOKEN as.
#
# Pods through the API (names are unique per case; NS defaults to default):
#   api_create_pod [NS] < MANIFEST       create a Pod (YAML or JSON on stdin) with spec.nodeName set
#                            to $RK_NODE (added when missing), after wait_capacity for every extended
#                            resource the manifest asks for. The kubelet's own helpers (pod_json,
#                            pod_exec, wait_container_running, pod_device_ids, pod_logs) work on it.
#   api_pod NS NAME          the Pod as the API server has it (JSON).
#   api_condition NS NAME TYPE           the condition's JSON ({} when absent).
#   wait_api_condition NS NAME TYPE STATUS [TIMEOUT_S]   wait until condition TYPE has STATUS.
#   wait_api_phase NS NAME PHASE [TIMEOUT_S]
#   patch_condition [-t TOKEN] NS NAME TYPE STATUS REASON MESSAGE   strategic merge patch of
#                            pods/status adding or updating one condition, the kubelet's own shape
#                            (lastTransitionTime now). Prints the HTTP status code.
#   api_delete_pod NS NAME [TIMEOUT_S]   delete (grace 1 s); once the kubelet stopped its containers,
#                            force the deletion (the v1.20 kubelet would wait for its container GC, up
#                            to a minute); wait until the kubelet removed it.
#   api_delete_all_pods      delete every Pod that is not a mirror Pod, in every namespace.
#   api_force_delete_node_pods   every Pod bound to $RK_NODE, mirror Pods too, grace 0, no wait (for
#                            a node about to go away: the VM between cases).
#   api_events NS NAME       the Pod's events, both APIs (core/v1 and events.k8s.io/v1), one JSON
#                            object a line: {api, type, reason, note, count, series, controller, instance}.
#   describe_pod NS NAME     `kubectl describe pod` (kubectl v1.34 from deploy/test) against the real
#                            API server.
#   rk_kubectl ARGS...       kubectl v1.34 as admin inside the node's namespace.
#   api_node                 the Node object; node_allocatable RES: its status.allocatable[RES].
#
# The kubelet's capacity (issue 27: a Pod created before the agent registered is refused with
# "requested number of devices unavailable ... Available: 0"):
#   wait_capacity RES [N=1] [TIMEOUT_S=60]  wait until the kubelet reports at least N allocatable
#                            units of RES from the current kubelet and agent: its device-manager
#                            checkpoint (what admission uses) written after both started (the files
#                            $RK_WORK/kubelet.started and agent.started), and, when registered, the
#                            Node's status.allocatable.
#   capacity_wait_manifest   wait_capacity RES 1 for each of the agent's resources (RK_DEVICE_RESOURCES)
#                            that a manifest on stdin asks for. run_static_pod and api_create_pod call
#                            it (RK_WAIT_CAPACITY=0 turns that off; a timeout is logged, not fatal).

RK_API_PORT=${RK_API_PORT:-16443}
RK_ETCD_PORT=${RK_ETCD_PORT:-23790}
RK_API_BIND=${RK_API_BIND:-0.0.0.0}  # inside the node's own network namespace
RK_ETCD_DATA=${RK_ETCD_DATA:-/var/lib/rk-etcd}  # the node's tmpfs
RK_APISERVER_BIN=${RK_APISERVER_BIN:-${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kube-apiserver/kube-apiserver-v1.20.2}

api_check_parts() {
  local t
  for t in etcd openssl curl jq; do
    command -v "$t" >/dev/null || { echo "$t not installed (etcd-server, openssl)"; return 1; }
  done
  [[ -x $RK_APISERVER_BIN ]] || { echo "no kube-apiserver binary at $RK_APISERVER_BIN"; return 1; }
  return 0
}

rk_api_random() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

rk_api_kubeconfig() {  # OUT USER TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: rk
    cluster: {server: "$RK_API", certificate-authority: "$RK_API_DIR/ca.crt"}
users:
  - name: $2
    user: {token: "$3"}
contexts:
  - name: rk
    context: {cluster: rk, user: $2}
current-context: rk
EOF
}

# Keys (EC P-256: quick to make, also under TCG), a CA, the serving certificate, two tokens.
rk_api_files() {
  local d=$RK_API_DIR node_token
  mkdir -p "$d"
  RK_API_HOST=${RK_API_HOST:-127.0.0.1}
  RK_API=https://$RK_API_HOST:$RK_API_PORT
  [[ -s $d/admin.kubeconfig ]] && { RK_ADMIN_TOKEN=$(cat "$d/admin.token"); return 0; }
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" &&
  openssl req -x509 -new -key "$d/ca.key" -out "$d/ca.crt" -days 7 -subj /CN=rk-ca 2>/dev/null &&
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/apiserver.key" &&
  openssl req -new -key "$d/apiserver.key" -out "$d/apiserver.csr" -subj /CN=kube-apiserver 2>/dev/null &&
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -out "$d/apiserver.crt" -days 7 -extfile <(printf 'subjectAltName=%s\n' \
      "IP:127.0.0.1,IP:$RK_API_HOST,IP:${RK_NODE_IP:-127.0.0.1},IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc") 2>/dev/null &&
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/sa.key" &&
  openssl ec -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null || { rk_log "openssl failed"; return 1; }
  RK_ADMIN_TOKEN=$(rk_api_random)
  node_token=$(rk_api_random)
  echo "$RK_ADMIN_TOKEN" >"$d/admin.token"
  {
    echo "$RK_ADMIN_TOKEN,admin,admin-uid,system:masters"
    echo "$node_token,system:node:$RK_NODE,node-$RK_NODE-uid,system:nodes"
  } >"$d/tokens.csv"
  chmod 600 "$d"/*.key "$d/tokens.csv"
  rk_api_kubeconfig "$d/kubelet.kubeconfig" "system:node:$RK_NODE" "$node_token"
  rk_api_kubeconfig "$d/admin.kubeconfig" admin "$RK_ADMIN_TOKEN"
}

start_control_plane() {
  local t0
  t0=$(date +%s.%N)
  RK_API_DIR=${RK_API_DIR:-$RK_WORK/api}
  rk_api_files || return 1
  local e=http://127.0.0.1:$RK_ETCD_PORT peer=http://127.0.0.1:$((RK_ETCD_PORT + 1)) i
  in_ns mkdir -p "$RK_ETCD_DATA"
  ns_spawn etcd "$RK_WORK/etcd.log" etcd --name rk --data-dir "$RK_ETCD_DATA" \
    --listen-client-urls "$e" --advertise-client-urls "$e" --listen-peer-urls "$peer" \
    --initial-advertise-peer-urls "$peer" --initial-cluster "rk=$peer" --log-level warn
  for ((i = 0; i < 300; i++)); do
    in_ns curl -sf -m 2 "$e/health" 2>/dev/null | grep -q '"health":"true"' && break
    ns_pid_alive etcd || break
    sleep 0.1
  done
  in_ns curl -sf -m 2 "$e/health" >/dev/null 2>&1 || { rk_log "etcd did not come up:"; tail -n 5 "$RK_WORK/etcd.log" >&2; return 1; }
  ns_spawn kube-apiserver "$RK_WORK/kube-apiserver.log" "$RK_APISERVER_BIN" \
    --etcd-servers="$e" --bind-address="$RK_API_BIND" --secure-port="$RK_API_PORT" --insecure-port=0 \
    --advertise-address="${RK_NODE_IP:-127.0.0.1}" \
    --tls-cert-file="$RK_API_DIR/apiserver.crt" --tls-private-key-file="$RK_API_DIR/apiserver.key" \
    --client-ca-file="$RK_API_DIR/ca.crt" --token-auth-file="$RK_API_DIR/tokens.csv" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
    --service-account-key-file="$RK_API_DIR/sa.pub" --service-account-signing-key-file="$RK_API_DIR/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/16 \
    --profiling=false --v="${RK_APISERVER_V:-1}"
  local end=$((SECONDS + ${RK_API_START_TIMEOUT:-180}))
  while ((SECONDS < end)); do
    [[ $(api_code GET /readyz) == 200 ]] && break
    ns_pid_alive kube-apiserver || break
    sleep 0.2
  done
  [[ $(api_code GET /readyz) == 200 ]] || {
    rk_log "kube-apiserver did not become ready:"; tail -n 10 "$RK_WORK/kube-apiserver.log" >&2; return 1; }
  # What kube-controller-manager would have made: the default namespace's ServiceAccount.
  api_sa default default >/dev/null || { rk_log "cannot create ServiceAccount default/default"; return 1; }
  RK_REGISTERED=1
  RK_CP_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
}

stop_control_plane() {
  ns_stop kube-apiserver
  ns_stop etcd
  RK_REGISTERED=
}

# ---- requests ---------------------------------------------------------------------------------------
# rk_api_curl WANT(body|code) [-t TOKEN] [-m] METHOD PATH [BODY]
rk_api_curl() {
  local want=$1 tok=${RK_ADMIN_TOKEN:-} patch=application/strategic-merge-patch+json; shift
  while [[ ${1:-} == -* ]]; do
    case $1 in -t) tok=$2; shift 2 ;; -m) patch=application/merge-patch+json; shift ;; *) break ;; esac
  done
  local method=$1 path=$2 body=${3-} ctype=application/json
  [[ $body == @* ]] && body=$(cat "${body#@}")
  [[ -n $body && ${body#"${body%%[![:space:]]*}"} != [\{\[]* ]] && ctype=application/yaml
  [[ $method == PATCH ]] && ctype=$patch
  local args=(-s -m 30 --cacert "$RK_API_DIR/ca.crt" -X "$method" -H "Accept: application/json")
  [[ $want == body ]] && args+=(-S)
  [[ -n $tok ]] && args+=(-H "Authorization: Bearer $tok")
  [[ -n $body ]] && args+=(-H "Content-Type: $ctype" --data-binary @-)
  if [[ $want == code ]]; then
    in_ns curl "${args[@]}" -o /dev/null -w '%{http_code}\n' "$RK_API$path" <<<"$body"
  else
    local out code
    out=$(in_ns curl "${args[@]}" -w '\n%{http_code}' "$RK_API$path" <<<"$body") || return 1
    code=${out##*$'\n'}
    printf '%s\n' "${out%$'\n'*}"
    [[ $code == 2?? ]]
  fi
}
api() { rk_api_curl body "$@"; }
api_code() { rk_api_curl code "$@"; }

api_create_if_missing() {  # PATH BODY: POST, 409 AlreadyExists is fine
  local c
  c=$(api_code POST "$1" "$2")
  [[ $c == 201 || $c == 409 ]] || { rk_log "POST $1: HTTP $c"; return 1; }
}

api_sa() {  # NS NAME
  api_create_if_missing "/api/v1/namespaces/$1/serviceaccounts" \
    "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"$2\"},\"automountServiceAccountToken\":false}"
}

api_namespace() {  # NS
  api_create_if_missing /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}" &&
    api_sa "$1" default
}

api_clusterrole() {  # NAME RULES_JSON
  api_create_if_missing /apis/rbac.authorization.k8s.io/v1/clusterroles \
    "$(jq -cn --arg n "$1" --argjson r "$2" '{apiVersion:"rbac.authorization.k8s.io/v1",kind:"ClusterRole",metadata:{name:$n},rules:$r}')"
}

api_role() {  # NS NAME RULES_JSON
  api_create_if_missing "/apis/rbac.authorization.k8s.io/v1/namespaces/$1/roles" \
    "$(jq -cn --arg n "$2" --argjson r "$3" '{apiVersion:"rbac.authorization.k8s.io/v1",kind:"Role",metadata:{name:$n},rules:$r}')"
}

api_bind() {  # NS("" = cluster) NAME ROLE_KIND ROLE SA_NS SA
  local path=/apis/rbac.authorization.k8s.io/v1/clusterrolebindings kind=ClusterRoleBinding
  [[ -n $1 ]] && path=/apis/rbac.authorization.k8s.io/v1/namespaces/$1/rolebindings kind=RoleBinding
  api_create_if_missing "$path" "$(jq -cn --arg k "$kind" --arg n "$2" --arg rk "$3" --arg r "$4" \
    --arg sns "$5" --arg sa "$6" '{apiVersion:"rbac.authorization.k8s.io/v1",kind:$k,metadata:{name:$n},
      roleRef:{apiGroup:"rbac.authorization.k8s.io",kind:$rk,name:$r},
      subjects:[{kind:"ServiceAccount",name:$sa,namespace:$sns}]}')"
}

sa_token() {  # NS SA [SECONDS] [AUDIENCE]
  local spec
  spec=$(jq -cn --argjson s "${3:-3600}" --arg a "${4:-}" \
    '{apiVersion:"authentication.k8s.io/v1",kind:"TokenRequest",
      spec:({expirationSeconds:$s} + (if $a == "" then {} else {audiences:[$a]} end))}')
  api POST "/api/v1/namespaces/$1/serviceaccounts/$2/token" "$spec" | jq -er '.status.token'
}

token_review() {  # [-t REVIEWER_TOKEN] TOKEN [AUDIENCE]
  local as=()
  [[ $1 == -t ]] && { as=(-t "$2"); shift 2; }
  api "${as[@]}" POST /apis/authentication.k8s.io/v1/tokenreviews "$(jq -cn --arg t "$1" --arg a "${2:-}" \
    '{apiVersion:"authentication.k8s.io/v1",kind:"TokenReview",
      spec:({token:$t} + (if $a == "" then {} else {audiences:[$a]} end))}')" | jq -c '.status'
}

access_review() {  # [-t REVIEWER_TOKEN] USER GROUPS_CSV VERB RESOURCE NS [SUBRESOURCE] [NAME]
  local as=()
  [[ $1 == -t ]] && { as=(-t "$2"); shift 2; }
  api "${as[@]}" POST /apis/authorization.k8s.io/v1/subjectaccessreviews "$(jq -cn --arg u "$1" --arg g "$2" \
    --arg v "$3" --arg r "$4" --arg ns "$5" --arg sub "${6:-}" --arg n "${7:-}" \
    '{apiVersion:"authorization.k8s.io/v1",kind:"SubjectAccessReview",
      spec:{user:$u,groups:($g | split(",")),resourceAttributes:{verb:$v,resource:$r,namespace:$ns,
        subresource:$sub,name:$n}}}')" | jq -c '.status | {allowed, denied, reason}'
}

api_whoami() {  # TOKEN
  token_review "$1" | jq -r 'if .authenticated then ([.user.username] + .user.groups | join(" ")) else "unauthenticated" end'
}

# ---- Pods -------------------------------------------------------------------------------------------
api_pod() { api GET "/api/v1/namespaces/$1/pods/$2"; }

api_condition() {  # NS NAME TYPE
  api_pod "$1" "$2" | jq -c --arg t "$3" '[.status.conditions[]? | select(.type == $t)][0] // {}'
}

wait_api_condition() {  # NS NAME TYPE STATUS [TIMEOUT]
  local end=$((SECONDS + ${5:-60})) c
  while ((SECONDS < end)); do
    c=$(api_condition "$1" "$2" "$3" 2>/dev/null)
    [[ $(jq -r '.status // empty' <<<"$c" 2>/dev/null) == "$4" ]] && return 0
    sleep 0.1
  done
  rk_log "pod $1/$2: condition $3 is ${c:-absent}, wanted $4"
  return 1
}

wait_api_phase() {  # NS NAME PHASE [TIMEOUT]
  local end=$((SECONDS + ${4:-60})) p
  while ((SECONDS < end)); do
    p=$(api_pod "$1" "$2" 2>/dev/null | jq -r '.status.phase // empty')
    [[ $p == "$3" ]] && return 0
    [[ $3 == Running && ( $p == Failed || $p == Succeeded ) ]] && break
    sleep 0.2
  done
  rk_log "pod $1/$2: phase '${p:-none}', wanted $3: $(api_pod "$1" "$2" 2>/dev/null | jq -c '.status | {phase, reason, message}')"
  return 1
}

patch_condition() {  # [-t TOKEN] NS NAME TYPE STATUS REASON MESSAGE
  local tok=()
  [[ $1 == -t ]] && { tok=(-t "$2"); shift 2; }
  api_code "${tok[@]}" PATCH "/api/v1/namespaces/$1/pods/$2/status" "$(jq -cn --arg t "$3" --arg s "$4" \
    --arg r "$5" --arg m "$6" --arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    '{status:{conditions:[{type:$t,status:$s,reason:$r,message:$m,lastTransitionTime:$now,lastProbeTime:null}]}}')"
}

api_create_pod() {  # [NS] < MANIFEST
  local ns=${1:-} m
  m=$(cat)
  if [[ ${m#"${m%%[![:space:]]*}"} == \{* ]]; then
    m=$(jq -c --arg n "$RK_NODE" --arg ns "$ns" \
      '.spec.nodeName //= $n | if $ns != "" then .metadata.namespace = $ns else . end' <<<"$m")
    ns=$(jq -r '.metadata.namespace // "default"' <<<"$m")
  else
    grep -qE '^  nodeName:' <<<"$m" || m=$(sed "s/^spec:\$/spec:\n  nodeName: $RK_NODE/" <<<"$m")
    # NS wins over the manifest's first "namespace:" (block or flow style metadata).
    [[ -n $ns ]] && m=$(sed "0,/namespace: *[^,} ]*/s//namespace: $ns/" <<<"$m")
    [[ -n $ns ]] || ns=$(grep -oE -m1 'namespace: *[^,} ]+' <<<"$m" | sed 's/namespace: *//')
    ns=${ns:-default}
  fi
  capacity_wait_manifest <<<"$m"
  api POST "/api/v1/namespaces/$ns/pods" "$m" >/dev/null
}

# The v1.20 kubelet deletes a Pod from the API only once its sandbox is gone, which its container GC
# does once a minute: once the kubelet stopped every container, the deletion is finished as
# `kubectl delete --force` would (the kubelet then removes the Pod at once).
api_delete_pod() {  # NS NAME [TIMEOUT]
  local end=$((SECONDS + ${3:-60})) j
  api_code DELETE "/api/v1/namespaces/$1/pods/$2" '{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":1}' >/dev/null
  while ((SECONDS < end)); do
    j=$(pod_json "$2")
    [[ -z $j ]] && break
    jq -e '[.status.containerStatuses[]?, .status.initContainerStatuses[]? | .state.running] | any' \
      >/dev/null 2>&1 <<<"$j" || break
    sleep 0.2
  done
  api_code DELETE "/api/v1/namespaces/$1/pods/$2" '{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}' >/dev/null
  while ((SECONDS < end)); do
    [[ $(api_code GET "/api/v1/namespaces/$1/pods/$2") == 404 && -z $(pod_json "$2") ]] && return 0
    sleep 0.2
  done
  rk_log "pod $1/$2 still there $((${3:-60})) s after its deletion"
  return 1
}

api_delete_all_pods() {
  local p
  [[ -n ${RK_REGISTERED:-} ]] || return 0
  for p in $(api GET /api/v1/pods | jq -r '.items[] |
      select(.metadata.annotations["kubernetes.io/config.mirror"] == null) | "\(.metadata.namespace)/\(.metadata.name)"'); do
    api_delete_pod "${p%%/*}" "${p#*/}" 60
  done
}

api_force_delete_node_pods() {  # every Pod bound to $RK_NODE, mirror Pods too, at once (grace 0)
  local p
  for p in $(api GET "/api/v1/pods?fieldSelector=spec.nodeName%3D$RK_NODE" |
             jq -r '.items[] | "\(.metadata.namespace)/\(.metadata.name)"'); do
    api_code DELETE "/api/v1/namespaces/${p%%/*}/pods/${p#*/}" \
      '{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}' >/dev/null
  done
}

api_events() {  # NS NAME
  local core new
  core=$(api GET "/api/v1/namespaces/$1/events?fieldSelector=involvedObject.name=$2" | jq -c '.items[] |
    {api: "core/v1", type, reason, note: .message, count, series, controller: (.reportingComponent // .source.component),
     instance: (.reportingInstance // .source.host)}')
  new=$(api GET "/apis/events.k8s.io/v1/namespaces/$1/events?fieldSelector=regarding.name=$2" | jq -c '.items[] |
    {api: "events.k8s.io/v1", type, reason, note, count: .deprecatedCount, series, controller: .reportingController,
     instance: .reportingInstance}')
  # An event written through either API is readable through both: print each once.
  printf '%s\n%s\n' "$new" "$core" | grep . | jq -sc 'unique_by([.reason, .note]) | .[]'
}

api_node() { api GET "/api/v1/nodes/$RK_NODE"; }
node_allocatable() { api_node 2>/dev/null | jq -r --arg r "$1" '.status.allocatable[$r] // "0"'; }

rk_kubectl() {
  local tools here
  here=$(realpath "$RK_HERE/../../deploy/test")
  if [[ -z ${RK_KUBECTL:-} ]]; then
    [[ -f $here/node_modules/.package-lock.json ]] ||
      (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) >&2 || return 1
    tools=$("$here/lib/k8s-tools.sh") || return 1
    RK_KUBECTL=$tools/kubectl
  fi
  in_ns "$RK_KUBECTL" --kubeconfig "$RK_API_DIR/admin.kubeconfig" "$@"
}

describe_pod() { rk_kubectl describe pod -n "$1" "$2"; }

# ---- the kubelet's capacity -------------------------------------------------------------------------
rk_mtime() { stat -c %.9Y "$1" 2>/dev/null || echo 0; }

wait_capacity() {  # RES [N] [TIMEOUT]
  local res=$1 n=${2:-1} end=$((SECONDS + ${3:-60})) ck since have api_have
  local ckpt=$RK_KUBELET_DIR/device-plugins/kubelet_internal_checkpoint
  while ((SECONDS < end)); do
    # The checkpoint must come from the current kubelet and agent: a kubelet starts with every
    # resource at zero and rewrites the file only when a plugin's device list arrives.
    since=$(printf '%s\n' "$(rk_mtime "$RK_WORK/kubelet.started")" "$(rk_mtime "$RK_WORK/agent.started")" | sort -g | tail -1)
    ck=$(rk_mtime "$ckpt")
    have=0
    if awk -v a="$ck" -v b="$since" 'BEGIN{exit !(a > b)}'; then
      have=$(jq -r --arg r "$res" '.Data.RegisteredDevices[$r] // [] | length' "$ckpt" 2>/dev/null || echo 0)
    fi
    api_have=$have
    [[ -n ${RK_REGISTERED:-} ]] && api_have=$(node_allocatable "$res")
    ((have >= n && api_have >= n)) && return 0
    sleep 0.1
  done
  rk_log "wait_capacity $res $n: the kubelet reports ${have:-0} (checkpoint) / ${api_have:-0} (Node allocatable)"
  return 1
}

RK_DEVICE_RESOURCES=${RK_DEVICE_RESOURCES:-vpc.amazonaws.com/efa device.gpustack.ai/rdma device.gpustack.ai/rdma.shared device.gpustack.ai/rdma.partitioned}
capacity_wait_manifest() {
  local r
  [[ ${RK_WAIT_CAPACITY:-1} == 1 ]] || return 0
  # "RESOURCE: N" anywhere (block or flow YAML, JSON), for the agent's resources only. A timeout is
  # logged and the Pod is created anyway: some cases ask for more than the node has, on purpose.
  for r in $(grep -oE '"?[a-z0-9.-]+\.[a-z]+/[A-Za-z0-9._-]+"? *: *"?[0-9]+' | tr -d '" ' | cut -d: -f1 | sort -u); do
    [[ " $RK_DEVICE_RESOURCES " == *" $r "* ]] || continue
    wait_capacity "$r" 1 "${RK_CAPACITY_TIMEOUT:-30}" || true
  done
  return 0
}
