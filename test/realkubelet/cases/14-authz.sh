# Case 14 (issue 25): the real authenticator and authorizer (kube-apiserver v1.20.2, Node,RBAC) for a
# ServiceAccount with the agent's rights only (get/list/watch pods, patch pods/status):
# - what it was given works (get, list by spec.nodeName, patch of pods/status: 200), so each 403 below
#   is the authorizer's answer, not a broken token;
# - it is denied (403 Forbidden, naming the ServiceAccount) a Pod spec update (PATCH and PUT), a
#   delete (the Pod stays), a Pod create and another namespace's Secrets; a bogus token gets 401;
# - TokenReview: its token authenticates as system:serviceaccount:NS:NAME with the ServiceAccount
#   groups; a bogus token does not; a token minted for audience "fabric-agent" passes only a review
#   for that audience; the token of a deleted ServiceAccount no longer does;
# - SubjectAccessReview answers allowed for exactly its verbs, denied for the rest; the Node
#   authorizer allows the kubelet's identity to read Pods (its static rules) and refuses it a Secret
#   no Pod of its node uses (no edge in its graph);
# - the review APIs as the agent would call them (issue 25's /v1/pods): a ServiceAccount bound to
#   system:auth-delegator may create both reviews; the agent's own ServiceAccount may not.
# rk: needs the API server
NS=rk-work SA_NS=fabric-system SA=rk-agent
SA_USER=system:serviceaccount:$SA_NS:$SA SA_GROUPS=system:serviceaccounts,system:serviceaccounts:$SA_NS,system:authenticated
ok=0
api_namespace "$NS" && api_namespace "$SA_NS" && api_sa "$SA_NS" "$SA" &&
  api_clusterrole rk-agent '[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list","watch"]},
                             {"apiGroups":[""],"resources":["pods/status"],"verbs":["patch"]}]' &&
  api_bind "" rk-agent ClusterRole rk-agent "$SA_NS" "$SA" || { echo "NOT OK: RBAC set-up"; exit 1; }
TOKEN=$(sa_token "$SA_NS" "$SA") || { echo "NOT OK: no token from the TokenRequest API"; exit 1; }
mkpod c14-target "" | api_create_pod "$NS" || { echo "NOT OK: the API server refused the Pod"; exit 1; }
wait_api_phase "$NS" c14-target Running 60 || ok=1
P=/api/v1/namespaces/$NS/pods/c14-target

as_agent() {  # WANT_CODE DESCRIPTION METHOD PATH [BODY]
  local body code
  body=$(api -t "$TOKEN" "${@:3}" 2>&1)
  code=$(api_code -t "$TOKEN" "${@:3}")
  echo "  $3 $4 -> $code $(jq -r '.message // empty' <<<"$body" 2>/dev/null | cut -c1-160)"
  expect "$2 ($code, want $1)" test "$code" == "$1" || ok=1
  if [[ $1 == 403 ]]; then
    expect "the 403 names the ServiceAccount" grep -q "User \"$SA_USER\" cannot" <<<"$(jq -r .message <<<"$body")" || ok=1
  fi
}
echo "as $SA_USER:"
as_agent 200 "get its Pod" GET "$P"
as_agent 200 "list Pods on its node" GET "/api/v1/pods?fieldSelector=spec.nodeName%3D$RK_NODE"
as_agent 200 "patch pods/status" PATCH "$P/status" '{"status":{"conditions":[{"type":"fabric.gpustack.ai/Transport","status":"True","reason":"Rdma"}]}}'
as_agent 403 "a Pod spec update (PATCH) is denied" PATCH "$P" '{"spec":{"activeDeadlineSeconds":5}}'
as_agent 403 "a Pod label change (PATCH metadata) is denied" PATCH "$P" '{"metadata":{"labels":{"x":"y"}}}'
as_agent 403 "a full Pod update (PUT) is denied" PUT "$P" "$(api_pod "$NS" c14-target)"
as_agent 403 "a Pod delete is denied" DELETE "$P"
expect "and the Pod is still there" test "$(api_code GET "$P")" == 200 || ok=1
as_agent 403 "a Pod create is denied" POST "/api/v1/namespaces/$NS/pods" "$(mkpod c14-other "")"
as_agent 403 "another namespace's Secrets (kube-system) are denied" GET /api/v1/namespaces/kube-system/secrets
as_agent 403 "Secrets in the Pods' namespace are denied" GET "/api/v1/namespaces/$NS/secrets"
code=$(api_code -t "not-a-token" GET "$P")
expect "a bogus token gets 401 ($code)" test "$code" == 401 || ok=1

# ---- TokenReview ------------------------------------------------------------------------------------------
tr=$(token_review "$TOKEN")
echo "TokenReview(agent token): $tr"
expect "authenticated as $SA_USER" test "$(jq -r '.authenticated, .user.username' <<<"$tr" | paste -sd' ')" == "true $SA_USER" || ok=1
for g in ${SA_GROUPS//,/ }; do
  expect "  in group $g" jq -e --arg g "$g" '.user.groups | index($g) != null' <<<"$tr" >/dev/null || ok=1
done
expect "  bound to the ServiceAccount's UID" \
  test "$(jq -r .user.uid <<<"$tr")" == \
       "$(api GET "/api/v1/namespaces/$SA_NS/serviceaccounts/$SA" | jq -r .metadata.uid)" || ok=1
tr=$(token_review "not-a-token")
echo "TokenReview(bogus): $tr"
expect "a bogus token is not authenticated" test "$(jq -r .authenticated <<<"$tr")" != true || ok=1
aud_token=$(sa_token "$SA_NS" "$SA" 600 fabric-agent)
tr_aud=$(token_review "$aud_token" fabric-agent) tr_api=$(token_review "$aud_token")
echo "TokenReview(audience fabric-agent): for fabric-agent $(jq -c '{authenticated, audiences}' <<<"$tr_aud"); for the API server $(jq -c '{authenticated, error}' <<<"$tr_api")"
expect "a token for audience fabric-agent passes a review for fabric-agent" test "$(jq -r .authenticated <<<"$tr_aud")" == true || ok=1
expect "and not one for the API server's audience" test "$(jq -r .authenticated <<<"$tr_api")" != true || ok=1
api_sa "$SA_NS" rk-gone && gone_token=$(sa_token "$SA_NS" rk-gone) &&
  api DELETE "/api/v1/namespaces/$SA_NS/serviceaccounts/rk-gone" >/dev/null
tr=$(token_review "$gone_token")
echo "TokenReview(deleted ServiceAccount): $tr"
expect "a deleted ServiceAccount's token is not authenticated" test "$(jq -r .authenticated <<<"$tr")" != true || ok=1

# ---- SubjectAccessReview -----------------------------------------------------------------------------------
sar() {  # WANT(true|false) VERB RESOURCE NS [SUB] [NAME] -- as $SAR_USER/$SAR_GROUPS
  local r
  r=$(access_review "$SAR_USER" "$SAR_GROUPS" "${@:2}")
  echo "  SAR $SAR_USER ${*:2}: $r"
  expect "SubjectAccessReview: $SAR_USER ${*:2} -> allowed $1" test "$(jq -r '.allowed // false' <<<"$r")" == "$1" || ok=1
}
SAR_USER=$SA_USER SAR_GROUPS=$SA_GROUPS
sar true get pods "$NS"
sar true list pods ""
sar true watch pods "$NS"
sar true patch pods "$NS" status
sar false patch pods "$NS"
sar false update pods "$NS"
sar false delete pods "$NS"
sar false get secrets kube-system
sar false create events "$NS"
# The Node authorizer: the kubelet's identity may read Pods, not a Secret no Pod of its node uses.
SAR_USER=system:node:$RK_NODE SAR_GROUPS=system:nodes,system:authenticated
sar true get pods "$NS" "" c14-target
sar false get secrets kube-system "" rk-unrelated

# ---- the review APIs as the agent's /v1/pods would call them ----------------------------------------------
api_sa "$SA_NS" rk-reviewer && api_bind "" rk-reviewer ClusterRole system:auth-delegator "$SA_NS" rk-reviewer ||
  { echo "NOT OK: reviewer set-up"; ok=1; }
REVIEWER=$(sa_token "$SA_NS" rk-reviewer)
tr=$(token_review -t "$REVIEWER" "$TOKEN")
r=$(access_review -t "$REVIEWER" "$SA_USER" "$SA_GROUPS" list pods "$NS")
echo "as system:auth-delegator: TokenReview $(jq -c '{authenticated, user: .user.username}' <<<"$tr"); SubjectAccessReview list pods: $r"
expect "with system:auth-delegator a ServiceAccount may review tokens" test "$(jq -r .authenticated <<<"$tr")" == true || ok=1
expect "and access" test "$(jq -r .allowed <<<"$r")" == true || ok=1
code=$(api_code -t "$TOKEN" POST /apis/authentication.k8s.io/v1/tokenreviews \
  "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"TokenReview\",\"spec\":{\"token\":\"$REVIEWER\"}}")
expect "without it (the agent's rights only) a TokenReview is denied ($code)" test "$code" == 403 || ok=1
api_delete_pod "$NS" c14-target || ok=1
echo "RESULT: 3 granted verbs 200; spec PATCH/PUT, delete, create, Secrets 403; bogus 401; TokenReview and SubjectAccessReview as expected"
exit $ok
