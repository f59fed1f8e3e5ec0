#!/usr/bin/env python3
"""A minimal kube-apiserver stand-in for the DRA tests (stdlib only).

Serves resource.k8s.io/v1 resourceslices (cluster-scoped), resourceclaims
(namespaced, with /status) and deviceclasses over HTTPS with the real API
server's wire behaviour for what the fabric agent uses: list (label and
field selectors), get, create, update (optimistic concurrency), delete
(preconditions, finalizers), delete of a collection (the kubelet's start-up wipe of
its node's slices), server-side apply (create-or-replace), watch
(resourceVersion, bookmarks, 410 Expired), Status bodies on every error,
bearer-token authentication, RBAC for the DRA driver's ServiceAccount and the
node restriction of the charts' ValidatingAdmissionPolicy. README.md lists
what it does not emulate, and the control API under /fake/.
"""

import argparse
import copy
import datetime
import itertools
import json
import os
import queue
import random
import re
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_core  # noqa: E402  (Pods, Events, TokenReview, SubjectAccessReview)

GROUP = "resource.k8s.io"
VERSION = "v1"
GROUP_VERSION = GROUP + "/" + VERSION

# resource -> (Kind, namespaced, selectable fields beyond metadata.*, API group)
RESOURCES = {
    "resourceslices": ("ResourceSlice", False, ("spec.nodeName", "spec.driver"), GROUP),
    "resourceclaims": ("ResourceClaim", True, (), GROUP),
    "deviceclasses": ("DeviceClass", False, (), GROUP),
    # fake_core.py: what --pod-conditions and the authenticated /v1/pods use.
    "pods": ("Pod", True, ("spec.nodeName", "status.phase"), ""),
    "events": ("Event", True, ("regarding.name", "regarding.uid", "reason"), "events.k8s.io"),
}
KIND_TO_RESOURCE = {v[0]: k for k, v in RESOURCES.items()}

# What the DRA driver's ClusterRole in the charts grants (least privilege):
# its own slices (the admission policy narrows them to its node), claims and
# classes read-only.
DRIVER_RULES = {
    "resourceslices": {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
    "resourceclaims": {"get", "list", "watch"},
    "resourceclaims/status": set(),
    "deviceclasses": {"get", "list", "watch"},
}
POLICY_NAME = "resourceslices-policy-fabric-dra"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

MAX_SLICE_DEVICES = 128
MAX_ATTRS_AND_CAPS = 32
MAX_ATTR_STRING = 64
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error answered as a k8s Status."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def group_of(resource):
    return RESOURCES[resource][3] if resource in RESOURCES else GROUP


def group_version(resource):
    g = group_of(resource)
    return g + "/v1" if g else "v1"


def qualified(resource):
    g = group_of(resource)
    return resource + "." + g if g else resource


def details(resource, name, causes=None):
    d = {"group": group_of(resource), "kind": resource}
    if name:
        d["name"] = name
    if causes:
        d["causes"] = causes
    return d


def not_found(resource, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(resource), name), details(resource, name))


def conflict(resource, name, why):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (qualified(resource), name, why),
                    details(resource, name))


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def invalid(kind, resource, name, errors):
    """422 as field validation answers it: `Kind.group "name" is invalid: [e1, e2]`."""
    msgs = [e[1] for e in errors]
    text = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    causes = [{"reason": e[0], "message": e[1], "field": e[2]} for e in errors]
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (kind + ("." + group_of(resource) if group_of(resource) else ""), name, text),
                    details(resource, name, causes))


# ---- selectors ---------------------------------------------------------------

def parse_label_selector(text):
    """Returns a predicate over a labels dict; raises ApiError on bad syntax."""
    reqs = []
    if not text:
        return lambda labels: True
    # Split on commas outside parentheses.
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for p in parts:
        p = p.strip()
        m = re.match(r"^([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)$", p)
        if m:
            values = {v.strip() for v in m.group(3).split(",") if v.strip()}
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = re.match(r"^([^\s!=()]+)\s*(==|!=|=)\s*([^\s!=(),]*)$", p)
        if m:
            reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
            continue
        m = re.match(r"^(!?)([^\s!=(),]+)$", p)
        if m:
            reqs.append((m.group(2), "!exists" if m.group(1) else "exists", None))
            continue
        raise bad_request('unable to parse requirement: found \'%s\', expected: identifier' % p)

    def match(labels):
        for key, op, val in reqs:
            has = key in labels
            if op == "=" and (not has or labels[key] != val):
                return False
            if op == "!=" and has and labels[key] == val:
                return False
            if op == "in" and (not has or labels[key] not in val):
                return False
            if op == "notin" and has and labels[key] in val:
                return False
            if op == "exists" and not has:
                return False
            if op == "!exists" and has:
                return False
        return True
    return match


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


def parse_field_selector(resource, text):
    if not text:
        return lambda obj: True
    _, namespaced, extra, _ = RESOURCES[resource]
    allowed = {"metadata.name"} | set(extra)
    if namespaced:
        allowed.add("metadata.namespace")
    reqs = []
    for p in text.split(","):
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", p.strip())
        if not m:
            raise bad_request('invalid field selector: "%s"' % p)
        key = m.group(1).strip()
        if key not in allowed:
            raise bad_request('field label not supported: %s' % key)
        reqs.append((key, m.group(2) == "!=", m.group(3).strip()))

    def match(obj):
        for key, negate, val in reqs:
            if (field_value(obj, key) == val) == negate:
                return False
        return True
    return match


# ---- validation (the part of the real strategies the agent can trip) ----------

def validate_meta(kind, resource, obj, errors):
    name = obj["metadata"].get("name", "")
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        errors.append(("FieldValueInvalid", 'metadata.name: Invalid value: "%s": a lowercase RFC 1123 subdomain '
                       "must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
                       "with an alphanumeric character" % name, "metadata.name"))


def validate_slice(obj, old, errors):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errors.append(("FieldValueRequired", "spec: Required value", "spec"))
        return
    if not spec.get("driver"):
        errors.append(("FieldValueRequired", "spec.driver: Required value", "spec.driver"))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        errors.append(("FieldValueRequired", "spec.pool.name: Required value", "spec.pool.name"))
    count = pool.get("resourceSliceCount", 0)
    if not isinstance(count, int) or count <= 0:
        errors.append(("FieldValueInvalid", "spec.pool.resourceSliceCount: Invalid value: %s: must be greater "
                       "than zero" % json.dumps(count), "spec.pool.resourceSliceCount"))
    gen = pool.get("generation", 0)
    if not isinstance(gen, int) or gen < 0:
        errors.append(("FieldValueInvalid", "spec.pool.generation: Invalid value: %s: must be greater than or "
                       "equal to zero" % json.dumps(gen), "spec.pool.generation"))
    selectors = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(f)]
    if len(selectors) == 0:
        errors.append(("FieldValueRequired", "spec: Required value: exactly one of `nodeName`, `nodeSelector`, "
                       "`allNodes`, `perDeviceNodeSelection` is required", "spec"))
    elif len(selectors) > 1:
        errors.append(("FieldValueInvalid", "spec: Invalid value: \"{%s}\": exactly one of `nodeName`, "
                       "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields "
                       "are set" % ", ".join("`%s`" % s for s in selectors), "spec"))
    devices = spec.get("devices") or []
    if len(devices) > MAX_SLICE_DEVICES:
        errors.append(("FieldValueTooMany", "spec.devices: Too many: %d: must have at most %d items"
                       % (len(devices), MAX_SLICE_DEVICES), "spec.devices"))
    seen = set()
    for i, dev in enumerate(devices):
        path = "spec.devices[%d]" % i
        name = dev.get("name", "") if isinstance(dev, dict) else ""
        if not name or len(name) > 63 or not DNS_LABEL.match(name):
            errors.append(("FieldValueInvalid", '%s.name: Invalid value: "%s": a lowercase RFC 1123 label must '
                           "consist of lower case alphanumeric characters or '-', and must start and end with "
                           "an alphanumeric character" % (path, name), path + ".name"))
        elif name in seen:
            errors.append(("FieldValueDuplicate", '%s.name: Duplicate value: "%s"' % (path, name), path + ".name"))
        seen.add(name)
        if not isinstance(dev, dict):
            continue
        attrs = dev.get("attributes") or {}
        caps = dev.get("capacity") or {}
        if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPS:
            errors.append(("FieldValueInvalid", "%s: Invalid value: %d: the total number of attributes and "
                           "capacities must not exceed %d" % (path, len(attrs) + len(caps), MAX_ATTRS_AND_CAPS),
                           path))
        for key, val in attrs.items():
            apath = "%s.attributes[%s]" % (path, key)
            ident = key.split("/")[-1]
            if len(key.split("/")) > 2 or not C_IDENTIFIER.match(ident) or len(ident) > 32:
                errors.append(("FieldValueTypeInvalid", "%s: Invalid value: \"%s\": a valid C identifier "
                               "must start with alphabetic character or '_', followed by a string of "
                               "alphanumeric characters or '_'" % (apath, ident), apath))
            kinds = [k for k in ("bool", "int", "string", "version") if isinstance(val, dict) and k in val]
            if len(kinds) != 1:
                errors.append(("FieldValueRequired", "%s: Required value: exactly one value must be specified"
                               % apath, apath))
            elif kinds[0] == "string" and len(str(val["string"])) > MAX_ATTR_STRING:
                errors.append(("FieldValueTooLong", "%s.string: Too long: may not be more than %d bytes"
                               % (apath, MAX_ATTR_STRING), apath + ".string"))
    if old is not None:
        ospec = old.get("spec") or {}
        for path, new_v, old_v in (("spec.driver", spec.get("driver"), ospec.get("driver")),
                                   ("spec.pool.name", pool.get("name"), (ospec.get("pool") or {}).get("name"))):
            if new_v != old_v:
                errors.append(("FieldValueInvalid", "%s: Invalid value: %s: field is immutable"
                               % (path, json.dumps(new_v)), path))


def validate(kind, resource, obj, old):
    errors = []
    validate_meta(kind, resource, obj, errors)
    if resource == "resourceslices":
        validate_slice(obj, old, errors)
    elif resource == "events":
        errors.extend(fake_core.event_errors(obj, old, obj["metadata"].get("namespace")))
    elif not isinstance(obj.get("spec", {}), dict):
        errors.append(("FieldValueInvalid", "spec: Invalid value: must be an object", "spec"))
    if errors:
        raise invalid(kind, resource, obj["metadata"].get("name", ""), errors)


# ---- the store ---------------------------------------------------------------

class Watcher:
    ids = itertools.count(1)

    def __init__(self, resource, namespace, label_match, field_match):
        self.resource = resource
        self.namespace = namespace
        self.label_match = label_match
        self.field_match = field_match
        self.events = queue.Queue()
        self.closed = None  # None, "clean" or "abrupt"
        self.id = next(Watcher.ids)

    def matches(self, obj):
        md = obj.get("metadata", {})
        if self.namespace and md.get("namespace") != self.namespace:
            return False
        return self.label_match(md.get("labels") or {}) and self.field_match(obj)


class Store:
    def __init__(self, initial_rv, history):
        self.lock = threading.RLock()
        self.rv = initial_rv
        # Any watch from a resourceVersion below this one missed events.
        self.oldest_servable_rv = initial_rv
        self.objects = {r: {} for r in RESOURCES}  # resource -> {(ns, name): obj}
        self.managers = {}  # (resource, ns, name) -> {top-level field: manager}
        self.history = []  # (rv, resource, type, old_obj, obj)
        self.history_max = history
        self.watchers = []

    def next_rv(self):
        self.rv += 1
        return self.rv

    def record(self, resource, etype, old, obj):
        rv = int(obj["metadata"]["resourceVersion"])
        self.history.append((rv, resource, etype, old, obj))
        while len(self.history) > self.history_max:
            dropped = self.history.pop(0)
            self.oldest_servable_rv = dropped[0]
        for w in list(self.watchers):
            if w.resource == resource:
                deliver(w, etype, old, obj)

    def compact(self):
        with self.lock:
            self.history = []
            self.oldest_servable_rv = self.rv


def with_type(resource, obj):
    out = copy.deepcopy(obj)
    kind = RESOURCES[resource][0]
    out = dict([("kind", kind), ("apiVersion", group_version(resource))] + [(k, v) for k, v in out.items()
                                                                   if k not in ("kind", "apiVersion")])
    return out


def deliver(w, etype, old, obj):
    """Queues an event for one watcher the way the watch cache filters: an
    object leaving the selector is DELETED for it, one entering is ADDED."""
    now_in = w.matches(obj)
    was_in = old is not None and w.matches(old)
    if etype == "DELETED":
        if now_in or was_in:
            w.events.put(("DELETED", obj))
        return
    if now_in and was_in:
        w.events.put(("MODIFIED", obj))
    elif now_in:
        w.events.put(("ADDED", obj))
    elif was_in:
        w.events.put(("DELETED", obj))


# ---- auth --------------------------------------------------------------------

class Tokens:
    """token -> {"user": ..., "nodeName": ..., "role": "driver"|"admin"|"none"},
    re-read when the file changes, so tests can rotate and revoke."""

    def __init__(self, path):
        self.path = path
        self.stamp = None
        self.table = {}
        self.lock = threading.Lock()

    def lookup(self, token):
        if not self.path:
            return {"user": "system:anonymous-admin", "role": "admin"}
        with self.lock:
            try:
                st = os.stat(self.path)
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                if stamp != self.stamp:
                    with open(self.path) as f:
                        self.table = json.load(f).get("tokens", {})
                    self.stamp = stamp
            except (OSError, ValueError):
                pass
            return self.table.get(token)

    def entries(self):
        self.lookup("")  # re-reads a changed file
        with self.lock:
            return list(self.table.values())


ROLE_RULES = {"driver": DRIVER_RULES, "agent": fake_core.AGENT_RULES}


def allows(user, verb, resource, subresource, namespace):
    """RBAC as the fake has it: the role's rules, then the token's own "allow"
    list of {"resource": "pods[/sub]", "verbs": [...], "namespaces": [...]}
    (no namespaces: every namespace and the cluster scope)."""
    role = user.get("role", "driver")
    if role == "admin":
        return True
    key = resource + ("/" + subresource if subresource else "")
    if verb in ROLE_RULES.get(role, {}).get(key, set()):
        return True
    for rule in user.get("allow") or []:
        if rule.get("resource") != key or verb not in (rule.get("verbs") or []):
            continue
        if not rule.get("namespaces") or (namespace and namespace in rule["namespaces"]):
            return True
    return False


def authorize(user, verb, resource, subresource, namespace, name):
    key = resource + ("/" + subresource if subresource else "")
    if allows(user, verb, resource, subresource, namespace):
        return
    what = qualified(resource)
    if name:
        what += ' "%s"' % name
    scope = ('in the namespace "%s"' % namespace) if namespace else "at the cluster scope"
    raise ApiError(403, "Forbidden", '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s'
                   % (what, user["user"], verb, key, group_of(resource), scope), details(resource, name))


def admit_slice(server, user, operation, obj, old):
    """The node restriction the NVIDIA and DRANET charts install as a
    ValidatingAdmissionPolicy, for the driver's ServiceAccount only."""
    if user.get("role", "driver") != "driver":
        return
    user_node = user.get("nodeName") or ""
    target = old if operation == "DELETE" else obj
    obj_node = ((target or {}).get("spec") or {}).get("nodeName") or ""
    name = (target or {}).get("metadata", {}).get("name", "")
    if user_node == "":
        msg = ("no node association found for user, this user must run in a pod on a node and "
               "ServiceAccountTokenPodNodeInfo must be enabled")
    elif user_node != obj_node:
        msg = "this user running on node '%s' may not modify %s" % (
            user_node, "cluster resourceslices" if obj_node == "" else "resourceslices on node '%s'" % obj_node)
    else:
        return
    cause = "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s" % (POLICY_NAME, POLICY_NAME, msg)
    reason = server.policy_reason
    code = {"Forbidden": 403, "Invalid": 422}.get(reason, 422)
    what = qualified("resourceslices") + (' "%s"' % name if name else "")
    raise ApiError(code, reason, "%s is forbidden: %s" % (what, cause),
                   details("resourceslices", name, [{"message": cause}]))


# ---- the HTTP side -----------------------------------------------------------

PATH_RE = re.compile(r"^/(?:api/v1|apis/([a-z0-9.]+)/v1)/(?:namespaces/([^/]+)/)?([a-z]+)(?:/([^/]+))?(?:/([a-z]+))?/?$")
REVIEWS = {"/apis/authentication.k8s.io/v1/tokenreviews": "tokenreviews",
           "/apis/authorization.k8s.io/v1/subjectaccessreviews": "subjectaccessreviews"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    # -- plumbing

    def send_json(self, code, body, extra_headers=()):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.last_code = code

    def read_body(self):
        return self.body

    def slurp_body(self):
        """Reads the whole body before anything can refuse the request: an
        unread body would be parsed as the next request on this connection."""
        self.body = b""
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > 3 * 1024 * 1024:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise bad_request("fake-apiserver: chunked request bodies are not supported")
        self.body = self.rfile.read(n) if n else b""

    def log_request_entry(self, user, query):
        if getattr(self, "logged", False):
            return
        self.logged = True
        entry = {"method": self.command, "path": urllib.parse.urlsplit(self.path).path,
                 "query": {k: v[0] for k, v in query.items()}, "user": user["user"] if user else None,
                 "contentType": self.headers.get("Content-Type"), "code": getattr(self, "last_code", None),
                 "userAgent": self.headers.get("User-Agent")}
        entry.update(getattr(self, "log_extra", None) or {})
        with self.server.log_lock:
            self.server.request_log.append(entry)
            del self.server.request_log[:-1000]

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        self.logged = False
        self.last_code = None
        self.log_extra = None
        if url.path.startswith("/fake/"):
            try:
                self.slurp_body()
                self.control(url.path, query)
            except ApiError as e:
                self.send_json(e.code, e.status())
            return
        user = None
        try:
            self.slurp_body()
            user = self.authenticate()
            self.inject_fault(url.path)
            self.api(url.path, query, user)
        except ApiError as e:
            self.send_json(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # a bug here must still answer a Status
            self.send_json(500, ApiError(500, "InternalError", "fake-apiserver: %s: %s" % (type(e).__name__, e)).status())
        finally:
            self.log_request_entry(user, query)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

    def authenticate(self):
        auth = self.headers.get("Authorization", "")
        user = None
        if auth.startswith("Bearer "):
            user = self.server.tokens.lookup(auth[7:].strip())
        elif not self.server.tokens.path:
            user = self.server.tokens.lookup("")
        # A token issued for another audience (a Pod's projected token for
        # the agent) does not authenticate to the API server itself.
        if user is not None and not set(fake_core.token_audiences(user)) & set(fake_core.API_AUDIENCES):
            user = None
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user

    def inject_fault(self, path):
        with self.server.log_lock:
            for f in self.server.faults:
                if f["count"] > 0 and re.search(f["path"], path) and f["method"] in ("", self.command):
                    f["count"] -= 1
                    code = f["code"]
                    reason = {500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
                              429: "TooManyRequests"}.get(code, "InternalError")
                    raise ApiError(code, reason, f.get("message") or "fake: injected failure")

    # -- the API

    def api(self, path, query, user):
        self.current_user = user
        if path.rstrip("/") in REVIEWS and self.command == "POST":
            return self.review(REVIEWS[path.rstrip("/")], user)
        m = PATH_RE.match(path)
        if not m or m.group(3) not in RESOURCES or (m.group(1) or "") != group_of(m.group(3)):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, resource, name, sub = m.group(2), m.group(3), m.group(4), m.group(5)
        kind, namespaced = RESOURCES[resource][0], RESOURCES[resource][1]
        if (namespace and not namespaced) or (namespaced and name is not None and not namespace):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub and (sub != "status" or resource not in ("resourceclaims", "pods")):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        method = self.command
        store = self.server.store
        if name is None:
            if method == "GET":
                watch = query.get("watch", [""])[0] in ("1", "true")
                authorize(user, "watch" if watch else "list", resource, None, namespace, None)
                if watch:
                    return self.watch(resource, namespace, query)
                return self.list(resource, namespace, query)
            if method == "POST":
                authorize(user, "create", resource, None, namespace, None)
                return self.create(resource, namespace, user, query)
            if method == "DELETE":
                authorize(user, "deletecollection", resource, None, namespace, None)
                return self.delete_collection(resource, namespace, user, query)
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if method == "GET":
            authorize(user, "get", resource, sub, namespace, name)
            with store.lock:
                obj = store.objects[resource].get((namespace, name))
                if obj is None:
                    raise not_found(resource, name)
                return self.send_json(200, with_type(resource, obj))
        if method == "PUT":
            authorize(user, "update", resource, sub, namespace, name)
            return self.update(resource, namespace, name, sub, user, query)
        if method == "PATCH":
            authorize(user, "patch", resource, sub, namespace, name)
            return self.patch(resource, namespace, name, sub, user, query)
        if method == "DELETE":
            if sub:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            authorize(user, "delete", resource, None, namespace, name)
            return self.delete(resource, namespace, name, user)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def review(self, resource, user):
        """POST of a TokenReview or SubjectAccessReview: answered, not stored."""
        authorize(user, "create", resource, None, None, None)
        try:
            body = json.loads(self.read_body() or b"{}")
        except ValueError as e:
            raise bad_request("error decoding JSON: %s" % e)
        if resource == "tokenreviews":
            self.log_extra = {"audiences": (body.get("spec") or {}).get("audiences")}
            if not ((body.get("spec") or {}).get("token")):
                raise ApiError(422, "Invalid", 'TokenReview.authentication.k8s.io "" is invalid: spec.token: '
                               "Required value")
            return self.send_json(201, fake_core.token_review(self.server.tokens, body))
        attrs = (body.get("spec") or {}).get("resourceAttributes")
        if not (body.get("spec") or {}).get("user") or not isinstance(attrs, dict):
            raise ApiError(422, "Invalid", 'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user and '
                           "spec.resourceAttributes are required (fake)")
        rules_of = lambda entry: (lambda verb, res, sub, ns: allows(entry, verb, res, sub, ns))  # noqa: E731
        return self.send_json(201, fake_core.subject_access_review(self.server.tokens, rules_of, body))

    def parse_object(self, resource, body, namespace, url_name=None):
        kind = RESOURCES[resource][0]
        try:
            obj = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise bad_request("error decoding JSON: %s" % e)
        if not isinstance(obj, dict):
            raise bad_request("the body of the request was in an unknown format")
        gv = group_version(resource)
        if obj.get("apiVersion", gv) != gv or obj.get("kind", kind) != kind:
            raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                              % (obj.get("apiVersion"), gv) if obj.get("kind", kind) == kind else
                              "Object 'Kind' is %s, not %s" % (obj.get("kind"), kind))
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        if url_name is not None:
            if md.get("name", url_name) != url_name:
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (md.get("name"), url_name))
            md["name"] = url_name
        if namespace:
            if md.get("namespace", namespace) != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            md["namespace"] = namespace
        elif "namespace" in md and md["namespace"]:
            md.pop("namespace")  # cluster-scoped: dropped, as the real server does
        obj["kind"], obj["apiVersion"] = kind, gv
        return obj

    def list(self, resource, namespace, query):
        label_match = parse_label_selector(query.get("labelSelector", [""])[0])
        field_match = parse_field_selector(resource, query.get("fieldSelector", [""])[0])
        store = self.server.store
        with store.lock:
            items = []
            for (ns, _), obj in sorted(store.objects[resource].items()):
                if namespace and ns != namespace:
                    continue
                if label_match(obj["metadata"].get("labels") or {}) and field_match(obj):
                    items.append(copy.deepcopy(obj))
            for it in items:  # items of a typed list carry no kind/apiVersion
                it.pop("kind", None)
                it.pop("apiVersion", None)
            body = {"kind": RESOURCES[resource][0] + "List", "apiVersion": group_version(resource),
                    "metadata": {"resourceVersion": str(store.rv)}, "items": items}
        self.send_json(200, body)

    def delete_collection(self, resource, namespace, user, query):
        """DELETE on a collection, as the kubelet wipes its node's ResourceSlices at
        start-up (v1.34: DeleteCollection, fieldSelector spec.nodeName=NODE): each
        match is admitted and deleted as one DELETE would be; the answer is the
        list of what went (finalizers are not modelled here)."""
        label_match = parse_label_selector(query.get("labelSelector", [""])[0])
        field_match = parse_field_selector(resource, query.get("fieldSelector", [""])[0])
        store = self.server.store
        with store.lock:
            gone_items = []
            for key, obj in sorted(store.objects[resource].items()):
                if namespace and key[0] != namespace:
                    continue
                if not (label_match(obj["metadata"].get("labels") or {}) and field_match(obj)):
                    continue
                if resource == "resourceslices":
                    admit_slice(self.server, user, "DELETE", None, obj)
                del store.objects[resource][key]
                store.managers.pop((resource, key[0], key[1]), None)
                gone = copy.deepcopy(obj)
                gone["metadata"]["resourceVersion"] = str(store.next_rv())
                store.record(resource, "DELETED", copy.deepcopy(obj), copy.deepcopy(gone))
                gone.pop("kind", None)
                gone.pop("apiVersion", None)
                gone_items.append(gone)
            body = {"kind": RESOURCES[resource][0] + "List", "apiVersion": group_version(resource),
                    "metadata": {"resourceVersion": str(store.rv)}, "items": gone_items}
        self.send_json(200, body)

    def stamp_create(self, resource, obj, user, manager, operation):
        store = self.server.store
        md = obj["metadata"]
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation",
                  "managedFields"):
            md.pop(k, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_rfc3339()
        md["generation"] = 1
        if resource == "resourceclaims":
            obj.pop("status", None)  # status is written through /status only
        if resource == "pods" and operation != "fake":
            obj["status"] = {"phase": "Pending"}
        md["managedFields"] = [managed_entry(manager, operation, obj)]
        md["resourceVersion"] = str(store.next_rv())

    def create(self, resource, namespace, user, query):
        obj = self.parse_object(resource, self.read_body(), namespace)
        kind = RESOURCES[resource][0]
        md = obj["metadata"]
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        validate(kind, resource, obj, None)
        if resource == "resourceslices":
            admit_slice(self.server, user, "CREATE", obj, None)
        store = self.server.store
        with store.lock:
            key = (namespace, md["name"])
            if key in store.objects[resource]:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (qualified(resource), md["name"]),
                               details(resource, md["name"]))
            self.stamp_create(resource, obj, user, query_manager(query, self), "Update")
            store.objects[resource][key] = obj
            store.managers[(resource,) + key] = {f: query_manager(query, self) for f in obj if f not in
                                                 ("kind", "apiVersion", "metadata")}
            store.record(resource, "ADDED", None, copy.deepcopy(obj))
            out = with_type(resource, obj)
        self.send_json(201, out)

    def update(self, resource, namespace, name, sub, user, query):
        new = self.parse_object(resource, self.read_body(), namespace, name)
        store = self.server.store
        with store.lock:
            old = store.objects[resource].get((namespace, name))
            if old is None:
                raise not_found(resource, name)
            want_rv = new["metadata"].get("resourceVersion")
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource, name, "the object has been modified; please apply your changes to the "
                               "latest version and try again")
            want_uid = new["metadata"].get("uid")
            if want_uid and want_uid != old["metadata"]["uid"]:
                raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (want_uid, old["metadata"]["uid"]))
            self.commit_update(resource, namespace, name, sub, user, old, new, query_manager(query, self),
                               "Update", 200)

    def json_patch(self, resource, namespace, name, sub, user, query, ctype):
        """Strategic-merge (Pods) and merge (Pods, Events) patches, with the
        object's metadata.uid in the patch as a precondition, as the kubelet
        patches pods/status."""
        try:
            body = json.loads(self.read_body() or b"null")
        except ValueError as e:
            raise bad_request("error decoding patch: %s" % e)
        if not isinstance(body, dict):
            raise bad_request("the patch is not a JSON object")
        store = self.server.store
        with store.lock:
            old = store.objects[resource].get((namespace, name))
            if old is None:
                raise not_found(resource, name)
            want_uid = (body.get("metadata") or {}).get("uid")
            if want_uid and want_uid != old["metadata"]["uid"]:
                raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (want_uid, old["metadata"]["uid"]))
            try:
                if ctype == "application/strategic-merge-patch+json":
                    if resource != "pods":
                        raise ApiError(415, "UnsupportedMediaType", "strategic merge patch is not supported for %s"
                                       % qualified(resource))
                    merged = fake_core.strategic_merge(old, body)
                else:
                    merged = fake_core.merge_patch(old, body)
            except fake_core.PatchError as e:
                raise bad_request(str(e))
            except fake_core.PatchServerError as e:
                raise ApiError(500, "InternalError", str(e))
            merged["metadata"] = dict(old["metadata"], **{k: v for k, v in (merged.get("metadata") or {}).items()
                                                          if k in ("labels", "annotations")})
            for k in ("labels", "annotations"):
                if k in merged["metadata"] and merged["metadata"][k] is None:
                    merged["metadata"].pop(k)
            self.commit_update(resource, namespace, name, sub, user, old, merged, query_manager(query, self),
                               "Update", 200)

    def commit_update(self, resource, namespace, name, sub, user, old, new, manager, operation, code):
        store = self.server.store
        kind = RESOURCES[resource][0]
        merged = copy.deepcopy(old)
        if sub == "status":
            merged["status"] = new.get("status", {})
        else:
            for k in list(merged.keys()):
                if k not in ("kind", "apiVersion", "metadata", "status"):
                    merged.pop(k)
            for k, v in new.items():
                if k not in ("kind", "apiVersion", "metadata", "status"):
                    merged[k] = v
            if resource not in ("resourceclaims", "pods") and "status" in new:
                merged["status"] = new["status"]
            for k in ("labels", "annotations", "finalizers", "ownerReferences"):
                if k in new["metadata"]:
                    merged["metadata"][k] = new["metadata"][k]
                else:
                    merged["metadata"].pop(k, None)
        validate(kind, resource, merged, old)
        if resource == "resourceslices" and sub is None:
            admit_slice(self.server, user, "UPDATE", merged, old)
        if resource == "pods" and user is not None and user.get("role") == "agent":
            why = fake_core.pod_policy_denial(user, old, merged)
            if why is not None:
                cause = "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s" % (
                    fake_core.POD_POLICY_NAME, fake_core.POD_POLICY_NAME, why)
                raise ApiError(422, "Invalid", 'pods "%s" is forbidden: %s' % (name, cause),
                               details("pods", name, [{"message": cause}]))
        if sub is None and merged.get("spec") != old.get("spec"):
            merged["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        unchanged = strip_volatile(merged) == strip_volatile(old)
        if not unchanged:
            mf = [e for e in merged["metadata"].get("managedFields", [])
                  if not (e["manager"] == manager and e["operation"] == operation
                          and e.get("subresource", "") == (sub or ""))]
            mf.append(managed_entry(manager, operation, new, sub))
            merged["metadata"]["managedFields"] = mf
            merged["metadata"]["resourceVersion"] = str(store.next_rv())
            owners = store.managers.setdefault((resource, namespace, name), {})
            for k in new:
                if k not in ("kind", "apiVersion", "metadata"):
                    owners[k] = manager
        if merged["metadata"].get("deletionTimestamp") and not merged["metadata"].get("finalizers"):
            del store.objects[resource][(namespace, name)]
            store.managers.pop((resource, namespace, name), None)
            if unchanged:
                merged["metadata"]["resourceVersion"] = str(store.next_rv())
            store.record(resource, "DELETED", copy.deepcopy(old), copy.deepcopy(merged))
        else:
            store.objects[resource][(namespace, name)] = merged
            if not unchanged:
                store.record(resource, "MODIFIED", copy.deepcopy(old), copy.deepcopy(merged))
        self.send_json(code, with_type(resource, merged))

    def patch(self, resource, namespace, name, sub, user, query):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype in ("application/strategic-merge-patch+json", "application/merge-patch+json") and \
                resource in ("pods", "events"):
            return self.json_patch(resource, namespace, name, sub, user, query, ctype)
        if ctype != "application/apply-patch+yaml":
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/apply-patch+yaml (fake: no other patch types)")
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            raise bad_request("fieldManager is required for apply requests")
        force = query.get("force", ["false"])[0] == "true"
        body = self.read_body()
        try:
            new = self.parse_object(resource, body, namespace, name)
        except ApiError as e:
            if e.code == 400 and "decoding JSON" in e.message:
                raise bad_request("error decoding YAML: fake-apiserver takes only the JSON form of YAML")
            raise
        if "apiVersion" not in json.loads(body) or "kind" not in json.loads(body):
            raise bad_request("apiVersion and kind must be set in an apply patch")
        store = self.server.store
        with store.lock:
            old = store.objects[resource].get((namespace, name))
            if old is None:
                if sub:
                    raise not_found(resource, name)
                # An apply that creates needs create as well as patch.
                authorize(user, "create", resource, None, namespace, name)
                kind = RESOURCES[resource][0]
                validate(kind, resource, new, None)
                if resource == "resourceslices":
                    admit_slice(self.server, user, "CREATE", new, None)
                self.stamp_create(resource, new, user, manager, "Apply")
                store.objects[resource][(namespace, name)] = new
                store.managers[(resource, namespace, name)] = {
                    f: manager for f in new if f not in ("kind", "apiVersion", "metadata")}
                store.record(resource, "ADDED", None, copy.deepcopy(new))
                return self.send_json(201, with_type(resource, new))
            want_rv = new["metadata"].get("resourceVersion")
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise conflict(resource, name, "the object has been modified; please apply your changes to the "
                               "latest version and try again")
            owners = store.managers.get((resource, namespace, name), {})
            clashes = [k for k in new if k not in ("kind", "apiVersion", "metadata") and owners.get(k)
                       and owners[k] != manager and new[k] != old.get(k)]
            if clashes and not force:
                msg = "Apply failed with %d conflict%s: %s" % (
                    len(clashes), "" if len(clashes) == 1 else "s",
                    "; ".join('conflict with "%s": .%s' % (owners[k], k) for k in clashes))
                raise ApiError(409, "Conflict", msg, details(resource, name,
                               [{"reason": "FieldManagerConflict", "message": 'conflict with "%s"' % owners[k],
                                 "field": "." + k} for k in clashes]))
            # Create-or-replace: the applied configuration is the whole
            # object this manager wants (fields it leaves out are dropped).
            full = copy.deepcopy(old)
            for k in list(full):
                if k not in ("kind", "apiVersion", "metadata", "status") and owners.get(k) in (manager, None):
                    full.pop(k)
            for k, v in new.items():
                if k not in ("kind", "apiVersion", "metadata"):
                    full[k] = v
            for k in ("labels", "annotations", "finalizers", "ownerReferences"):
                if k in new["metadata"]:
                    full["metadata"][k] = new["metadata"][k]
            self.commit_update(resource, namespace, name, sub, user, old, full, manager, "Apply", 200)

    def delete(self, resource, namespace, name, user):
        body = self.read_body()
        pre = {}
        if body.strip():
            try:
                opts = json.loads(body)
                pre = opts.get("preconditions") or {}
            except (ValueError, AttributeError):
                raise bad_request("error decoding DeleteOptions")
        store = self.server.store
        with store.lock:
            old = store.objects[resource].get((namespace, name))
            if old is None:
                raise not_found(resource, name)
            md = old["metadata"]
            if pre.get("uid") and pre["uid"] != md["uid"]:
                raise conflict(resource, name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (pre["uid"], md["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != md["resourceVersion"]:
                raise conflict(resource, name, "Precondition failed: ResourceVersion in precondition: %s, "
                               "ResourceVersion in object meta: %s" % (pre["resourceVersion"], md["resourceVersion"]))
            if resource == "resourceslices":
                admit_slice(self.server, user, "DELETE", None, old)
            if md.get("finalizers"):
                if not md.get("deletionTimestamp"):
                    new = copy.deepcopy(old)
                    new["metadata"]["deletionTimestamp"] = now_rfc3339()
                    new["metadata"]["deletionGracePeriodSeconds"] = 0
                    new["metadata"]["resourceVersion"] = str(store.next_rv())
                    store.objects[resource][(namespace, name)] = new
                    store.record(resource, "MODIFIED", copy.deepcopy(old), copy.deepcopy(new))
                    old = new
                return self.send_json(200, with_type(resource, old))
            del store.objects[resource][(namespace, name)]
            store.managers.pop((resource, namespace, name), None)
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(store.next_rv())
            store.record(resource, "DELETED", copy.deepcopy(old), copy.deepcopy(gone))
        # These stores set ReturnDeletedObject: the answer is the object.
        self.send_json(200, with_type(resource, gone))

    # -- watch

    def watch(self, resource, namespace, query):
        label_match = parse_label_selector(query.get("labelSelector", [""])[0])
        field_match = parse_field_selector(resource, query.get("fieldSelector", [""])[0])
        rv_text = query.get("resourceVersion", [""])[0]
        bookmarks = query.get("allowWatchBookmarks", [""])[0] == "true"
        try:
            timeout = float(query.get("timeoutSeconds", [""])[0] or self.server.watch_timeout)
        except ValueError:
            raise bad_request("invalid timeoutSeconds")
        store = self.server.store
        w = Watcher(resource, namespace, label_match, field_match)
        initial, expired = [], None
        with store.lock:
            if rv_text in ("", "0"):
                # Start at "any"/"most recent": synthetic ADDED for what exists.
                for (ns, _), obj in sorted(store.objects[resource].items()):
                    if w.matches(obj):
                        initial.append(("ADDED", copy.deepcopy(obj)))
            else:
                try:
                    rv = int(rv_text)
                except ValueError:
                    raise bad_request('invalid resource version "%s"' % rv_text)
                if rv > store.rv:
                    raise ApiError(504, "Timeout", "Timeout: Too large resource version: %d, current: %d"
                                   % (rv, store.rv), {"causes": [{"reason": "ResourceVersionTooLarge",
                                                                  "message": "Too large resource version"}],
                                                      "retryAfterSeconds": 1})
                if rv < store.oldest_servable_rv:
                    # The watch cache answers 200, then one ERROR event.
                    expired = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": "too old resource version: %d (%d)" % (rv, store.oldest_servable_rv),
                               "reason": "Expired", "code": 410}
                else:
                    for (erv, eres, etype, old, obj) in store.history:
                        if erv > rv and eres == resource:
                            deliver(w, etype, old, obj)
            if expired is None:
                store.watchers.append(w)
            last_rv = store.rv
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.last_code = 200
        # Logged when it starts: a watch may last until the client leaves.
        self.log_request_entry(self.current_user, query)

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def event(etype, obj):
            chunk(json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n")

        try:
            if expired is not None:
                event("ERROR", expired)
                chunk(b"")
                return
            for etype, obj in initial:
                event(etype, with_type(resource, obj))
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.server.bookmark_interval
            while True:
                if w.closed == "abrupt":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if w.closed or self.server.shutting_down:
                    break
                now = time.monotonic()
                if now >= deadline:
                    break
                try:
                    etype, obj = w.events.get(timeout=min(0.05, max(0.0, deadline - now)))
                    if etype == "RAW":  # /fake/watch-raw: bytes as they are
                        chunk(obj)
                        continue
                    event(etype, with_type(resource, obj))
                    last_rv = int(obj["metadata"]["resourceVersion"])
                except queue.Empty:
                    pass
                if bookmarks and time.monotonic() >= next_bookmark:
                    with store.lock:
                        # A bookmark may only name a version the watcher has
                        # every event up to: nothing queued for it.
                        if w.events.empty():
                            last_rv = max(last_rv, store.rv)
                    event("BOOKMARK", {"kind": RESOURCES[resource][0], "apiVersion": group_version(resource),
                                       "metadata": {"resourceVersion": str(last_rv)}})
                    next_bookmark = time.monotonic() + self.server.bookmark_interval
            chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            with store.lock:
                if w in store.watchers:
                    store.watchers.remove(w)

    # -- control API for tests (no auth: bind it to loopback)

    def control(self, path, query):
        store = self.server.store
        if path == "/fake/log" and self.command == "GET":
            with self.server.log_lock:
                return self.send_json(200, {"requests": list(self.server.request_log)})
        if path == "/fake/log" and self.command == "DELETE":
            with self.server.log_lock:
                self.server.request_log.clear()
            return self.send_json(200, {})
        if path == "/fake/state" and self.command == "GET":
            with store.lock:
                return self.send_json(200, {"resourceVersion": str(store.rv), "objects": {
                    r: [with_type(r, o) for _, o in sorted(objs.items())] for r, objs in store.objects.items()},
                    "watchers": len(store.watchers)})
        if path in ("/fake/objects", "/fake/claims") and self.command == "POST":
            obj = json.loads(self.read_body() or b"{}")
            resource = "resourceclaims" if path == "/fake/claims" else KIND_TO_RESOURCE.get(obj.get("kind"))
            if resource is None:
                raise bad_request("fake: unknown kind %r" % obj.get("kind"))
            namespace = (obj.get("metadata") or {}).get("namespace", "default" if RESOURCES[resource][1] else None)
            obj = self.parse_object(resource, json.dumps(obj).encode(), namespace)
            validate(RESOURCES[resource][0], resource, obj, None)
            with store.lock:
                key = (namespace, obj["metadata"]["name"])
                old = store.objects[resource].get(key)
                status = obj.get("status")
                if old is None:
                    given_uid = obj["metadata"].get("uid")
                    self.stamp_create(resource, obj, None, "fake-control", "fake")
                    if given_uid:  # a test that needs to know the UID (a Pod's, matched by cgroup)
                        obj["metadata"]["uid"] = given_uid
                else:
                    obj["metadata"].update({k: old["metadata"][k] for k in ("uid", "creationTimestamp")})
                    obj["metadata"]["generation"] = old["metadata"]["generation"] + (
                        obj.get("spec") != old.get("spec"))
                    obj["metadata"]["resourceVersion"] = str(store.next_rv())
                if status is not None:
                    obj["status"] = status  # injected claims may come allocated
                store.objects[resource][key] = obj
                store.record(resource, "ADDED" if old is None else "MODIFIED", copy.deepcopy(old) if old else None,
                             copy.deepcopy(obj))
                return self.send_json(201 if old is None else 200, with_type(resource, obj))
        m = re.match(r"^/fake/objects/([a-z]+)/(?:([^/]+)/)?([^/]+)$", path)
        if m and self.command == "DELETE" and m.group(1) in RESOURCES:
            resource, namespace, name = m.group(1), m.group(2), m.group(3)
            with store.lock:
                old = store.objects[resource].pop((namespace, name), None)
                if old is None:
                    raise not_found(resource, name)
                gone = copy.deepcopy(old)
                gone["metadata"]["resourceVersion"] = str(store.next_rv())
                store.record(resource, "DELETED", old, gone)
            return self.send_json(200, with_type(resource, gone))
        if path == "/fake/close-watches" and self.command == "POST":
            mode = "abrupt" if query.get("abrupt", ["0"])[0] == "1" else "clean"
            with store.lock:
                n = len(store.watchers)
                for w in store.watchers:
                    w.closed = mode
                store.watchers = []  # no event after this reaches them
            return self.send_json(200, {"closed": n})
        if path == "/fake/watch-raw" and self.command == "POST":
            # Hostile-stream tests: the body (or `repeat` copies of `byte`)
            # goes to every open watch as is, framing included.
            raw = self.read_body()
            if "repeat" in query:
                raw = query.get("byte", ["x"])[0].encode()[:1] * int(query["repeat"][0])
                if query.get("newline", ["1"])[0] == "1":
                    raw += b"\n"
            after = int(query.get("after", ["0"])[0])  # only watches opened after that id
            with store.lock:
                hit = [w for w in store.watchers if w.id > after]
                for w in hit:
                    w.events.put(("RAW", raw))
                return self.send_json(200, {"watchers": [w.id for w in hit]})
        if path == "/fake/compact" and self.command == "POST":
            store.compact()
            return self.send_json(200, {"oldestServable": str(store.oldest_servable_rv)})
        if path == "/fake/fail" and self.command == "DELETE":
            with self.server.log_lock:
                self.server.faults.clear()
            return self.send_json(200, {})
        if path == "/fake/fail" and self.command == "POST":
            with self.server.log_lock:
                self.server.faults.append({"path": query.get("path", [""])[0], "method": query.get("method", [""])[0],
                                           "code": int(query.get("code", ["503"])[0]),
                                           "count": int(query.get("count", ["1"])[0]),
                                           "message": query.get("message", [""])[0]})
            return self.send_json(200, {})
        raise ApiError(404, "NotFound", "fake: no control endpoint %s %s" % (self.command, path))


def query_manager(query, handler):
    m = query.get("fieldManager", [""])[0]
    if m:
        return m
    # Like the real server: the user agent up to its first '/'.
    return (handler.headers.get("User-Agent") or "unknown").split("/")[0]


def managed_entry(manager, operation, obj, sub=None):
    # Field sets at top level only (README: what is not emulated).
    fields = {"f:" + k: {} for k in obj if k not in ("kind", "apiVersion", "metadata")}
    e = {"manager": manager, "operation": operation, "apiVersion": GROUP_VERSION, "time": now_rfc3339(),
         "fieldsType": "FieldsV1", "fieldsV1": fields}
    if sub:
        e["subresource"] = sub
    return e


def strip_volatile(obj):
    o = copy.deepcopy(obj)
    for k in ("managedFields", "resourceVersion", "generation"):
        o["metadata"].pop(k, None)
    return o


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls = None

    def finish_request(self, request, client_address):
        # The TLS handshake runs on the connection's thread: a client that
        # stalls or rejects our certificate cannot block the accept loop.
        if self.tls is not None:
            try:
                request.settimeout(10)
                request = self.tls.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError):
                return
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            if self.tls is not None:
                try:
                    request.close()
                except OSError:
                    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the chosen port here (atomically) once listening")
    ap.add_argument("--cert", help="PEM certificate (HTTPS); without it plain HTTP")
    ap.add_argument("--key", help="PEM private key")
    ap.add_argument("--tokens", help='JSON {"tokens": {TOKEN: {"user", "nodeName", "role"}}}; re-read on change')
    ap.add_argument("--initial-rv", type=int, default=1000)
    ap.add_argument("--history", type=int, default=200, help="watch events kept; older RVs get 410")
    ap.add_argument("--bookmark-interval", type=float, default=5.0, help="seconds (the real one: about 60)")
    ap.add_argument("--watch-timeout", type=float, default=1800.0, help="seconds, without timeoutSeconds")
    ap.add_argument("--policy-reason", default="Invalid", choices=("Invalid", "Forbidden"),
                    help="the admission policy's validation reason (unset in the charts: Invalid, 422)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    srv = Server((args.address, args.port), Handler)
    srv.store = Store(args.initial_rv, args.history)
    srv.tokens = Tokens(args.tokens)
    srv.bookmark_interval = args.bookmark_interval
    srv.watch_timeout = args.watch_timeout
    srv.policy_reason = args.policy_reason
    srv.verbose = args.verbose
    srv.shutting_down = False
    srv.request_log = []
    srv.faults = []
    srv.log_lock = threading.Lock()
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        srv.tls = ctx
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % srv.server_address[1])
        os.rename(tmp, args.port_file)

    def stop(*_):
        srv.shutting_down = True
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
