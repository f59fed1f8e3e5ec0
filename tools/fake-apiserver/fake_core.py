"""Core v1 Pods, events.k8s.io/v1 Events, TokenReview and SubjectAccessReview
for fake_apiserver.py: what `fabric-agent --pod-conditions` and the
authenticated /v1/pods use (README.md says how far each goes).

Pure functions over the store's dicts; fake_apiserver.py routes to them.
"""

import copy
import json
import re

# The agent's ClusterRole in the chart (templates/pod-conditions-rbac.yaml):
# its node's Pods read-only, their status patched, Events written, and the
# TokenReview/SubjectAccessReview of /v1/pods (system:auth-delegator).
AGENT_RULES = {
    "pods": {"get", "list", "watch"},
    "pods/status": {"patch"},
    "events": {"create", "patch", "list"},
    "tokenreviews": {"create"},
    "subjectaccessreviews": {"create"},
}
POD_POLICY_NAME = "fabric-device-plugin-pod-conditions-own-node"
# The API server's own audience (its --api-audiences): a token without an
# "audiences" entry is issued for it, and only such a token calls the API.
API_AUDIENCES = ["https://kubernetes.default.svc"]
CONDITION_PREFIX = "fabric.gpustack.ai/"
AGENT_CONDITIONS = ("fabric.gpustack.ai/FabricAttached", "fabric.gpustack.ai/Transport")
SERVER_METADATA = ("resourceVersion", "managedFields")
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# Lists a strategic-merge patch merges by a key (PodSpec/PodStatus's
# patchMergeKey tags); every other list is replaced whole.
MERGE_KEYS = {
    "conditions": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "podIPs": "ip",
}

EVENT_TYPES = ("Normal", "Warning")
QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                            r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class PatchError(Exception):
    pass


class PatchServerError(Exception):
    """What the real server answers 500 for (a directive naming a list the struct lacks)."""


def strategic_merge(old, patch, key=None):
    """Applies a strategic-merge patch as the API server does for the types
    above: maps merge, null deletes, keyed lists merge by their key ("$patch":
    "delete" removes an element), other lists replace; "$setElementOrder/x"
    reorders a keyed list; other "$" directives are ignored."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(old) if isinstance(old, dict) else {}
    orders = {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            field = k.split("/", 1)[1]
            if key is None and field not in ("metadata", "spec", "status"):
                # The Pod object itself has no list fields (v1.20's answer).
                raise PatchServerError('unable to find api field in struct Pod for the json field "%s"' % field)
            orders[field] = v
            continue
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and k in MERGE_KEYS:
            out[k] = merge_keyed_list(out.get(k) or [], v, MERGE_KEYS[k])
        elif isinstance(v, dict):
            out[k] = strategic_merge(out.get(k), v, k)
        else:
            out[k] = copy.deepcopy(v)
    for k, order in orders.items():
        mk = MERGE_KEYS.get(k)
        if mk is None or not isinstance(out.get(k), list):
            continue
        rank = {str(e.get(mk)): i for i, e in enumerate(order) if isinstance(e, dict)}
        out[k] = sorted(out[k], key=lambda e: rank.get(str(e.get(mk)), len(rank)))
    return out


def merge_keyed_list(old, patch, mk):
    out = [copy.deepcopy(e) for e in old]
    for item in patch:
        if not isinstance(item, dict) or mk not in item:
            raise PatchError("a strategic-merge patch element of a list merged by %r lacks it" % mk)
        idx = next((i for i, e in enumerate(out) if isinstance(e, dict) and e.get(mk) == item[mk]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge({}, item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def merge_patch(old, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(old) if isinstance(old, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def event_errors(obj, old, namespace):
    """events.k8s.io/v1 validation (ValidateEventCreate/Update as v1.20 has it
    for v1): (reason, message, field) triples."""
    errs = []

    def req(field, value, max_len=None):
        if not value:
            errs.append(("FieldValueRequired", "%s: Required value" % field, field))
        elif max_len and len(value) > max_len:
            errs.append(("FieldValueTooLong", "%s: Too long: may not be longer than %d" % (field, max_len), field))

    req("eventTime", obj.get("eventTime"))
    rc = obj.get("reportingController") or ""
    req("reportingController", rc)
    if rc and not QUALIFIED_NAME.match(rc):
        errs.append(("FieldValueInvalid", 'reportingController: Invalid value: "%s": must be a qualified name' % rc,
                     "reportingController"))
    req("reportingInstance", obj.get("reportingInstance"), 128)
    req("action", obj.get("action"), 128)
    req("reason", obj.get("reason"), 128)
    if obj.get("type") not in EVENT_TYPES:
        errs.append(("FieldValueNotSupported", 'type: Unsupported value: "%s": supported values: "Normal", '
                     '"Warning"' % obj.get("type"), "type"))
    if len((obj.get("note") or "").encode()) > 1024:
        errs.append(("FieldValueTooLong", "note: Too long: may not be longer than 1024", "note"))
    reg = obj.get("regarding") or {}
    if reg.get("namespace") and reg.get("namespace") != namespace:
        errs.append(("FieldValueInvalid", "regarding.namespace: Invalid value: \"%s\": does not match event.namespace"
                     % reg.get("namespace"), "regarding.namespace"))
    series = obj.get("series")
    if series is not None:
        if not isinstance(series.get("count"), int) or series["count"] < 2:
            errs.append(("FieldValueInvalid", "series.count: Invalid value: %r: should be at least 2"
                         % series.get("count"), "series.count"))
        if not series.get("lastObservedTime"):
            errs.append(("FieldValueRequired", "series.lastObservedTime: Required value", "series.lastObservedTime"))
    if old is not None:
        for f in ("eventTime", "action", "reason", "type", "note", "regarding", "related", "reportingController",
                  "reportingInstance"):
            if obj.get(f) != old.get(f):
                errs.append(("FieldValueInvalid", "%s: Invalid value: field is immutable" % f, f))
    return errs


def pod_policy_denial(user, old, new):
    """The chart's ValidatingAdmissionPolicy for the agent's ServiceAccount on
    pods/status: only Pods bound to the token's node, and only the agent's two
    conditions may change (an allow-list: the rest of status, metadata but the
    server's bookkeeping, and the rest of the Pod stay). None when admitted,
    else the message."""
    node = (user.get("nodeName") or "")
    if not node:
        return "no node name in this ServiceAccount token: only a Pod-bound token may write Pod conditions"
    pod_node = ((old.get("spec") or {}).get("nodeName") or "")
    if pod_node != node:
        return "the agent on node %s may not write the status of a Pod on node %s" % (node, pod_node or "(none)")

    def others(pod):
        return [c for c in ((pod.get("status") or {}).get("conditions") or [])
                if c.get("type") not in AGENT_CONDITIONS]

    def without(d, keys):
        return {k: v for k, v in (d or {}).items() if k not in keys}

    if others(old) != others(new):
        return ("the agent may change only its conditions fabric.gpustack.ai/FabricAttached and "
                "fabric.gpustack.ai/Transport")
    if without(old.get("status"), ("conditions",)) != without(new.get("status"), ("conditions",)):
        return "the agent may change nothing in the Pod's status but status.conditions"
    if without(old.get("metadata"), SERVER_METADATA) != without(new.get("metadata"), SERVER_METADATA):
        return "the agent may change nothing in the Pod's metadata (finalizers, labels, annotations, owner references, ...)"
    if without(old, ("metadata", "status")) != without(new, ("metadata", "status")):
        return "the agent may change only status.conditions"
    return None


def token_audiences(entry):
    return entry.get("audiences") or API_AUDIENCES


def token_review(tokens, body):
    """As the API server reviews: the token is valid for the audiences the
    review names (none: the API server's own), status.audiences is the
    intersection. A token entry's "statusAudiences" stands for an
    authenticator that ignores the review's audiences and answers these."""
    spec = (body or {}).get("spec") or {}
    token = spec.get("token") or ""
    user = tokens.lookup(token) if token else None
    wanted = spec.get("audiences") or API_AUDIENCES
    common = [a for a in wanted if a in token_audiences(user)] if user is not None else []
    if user is not None and "statusAudiences" in user:
        common = user["statusAudiences"]
    if user is None:
        status = {"authenticated": False, "error": "invalid bearer token"}
    elif not common:
        status = {"authenticated": False,
                  "error": "[invalid bearer token, token audiences %s is invalid for the target audiences %s]"
                  % (json.dumps(token_audiences(user)), json.dumps(wanted))}
    else:
        u = {"username": user["user"], "uid": "uid-" + user["user"],
             "groups": user.get("groups", ["system:authenticated"])}
        if user.get("nodeName"):
            u["extra"] = {NODE_NAME_EXTRA: [user["nodeName"]]}
        status = {"authenticated": True, "user": u, "audiences": common}
    return {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": None},
            "spec": spec, "status": status}


def subject_access_review(tokens, rules_of, body):
    """Answers from the token table: the user's role and "allow" rules
    (rules_of(user) -> callable(verb, resource, subresource, namespace) -> bool)."""
    spec = (body or {}).get("spec") or {}
    attrs = spec.get("resourceAttributes") or {}
    username = spec.get("user") or ""
    entry = None
    for e in tokens.entries():
        if e.get("user") == username:
            entry = e
            break
    allowed = False
    if entry is not None:
        allowed = rules_of(entry)(attrs.get("verb", ""), attrs.get("resource", ""), attrs.get("subresource") or None,
                                  attrs.get("namespace") or None)
    reason = ("RBAC: allowed by the fake's rules" if allowed else
              'no RBAC rule lets "%s" %s %s%s' % (username, attrs.get("verb"), attrs.get("resource"),
                                               (' in namespace "%s"' % attrs["namespace"]) if attrs.get("namespace")
                                               else " at the cluster scope"))
    return {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"allowed": allowed, "reason": reason}}
