#!/usr/bin/env python3
"""Wire details of fake_apiserver.py that the C++ client tests do not reach:
claims and their status subresource, finalizers, generateName, selectors on
watches, bookmarks, apply conflicts. Plain HTTP (the TLS side is covered by
agent/kubeapi's tests). Usage: fake_apiserver_test.py [path/to/fake_apiserver.py]
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

FAKE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "fake_apiserver.py")
V1 = "/apis/resource.k8s.io/v1"


class FakeApiServerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        tokens = os.path.join(self.dir.name, "tokens.json")
        with open(tokens, "w") as f:
            json.dump({"tokens": {"admin": {"user": "admin", "role": "admin"},
                                  "node-a": {"user": "system:serviceaccount:fabric:dra", "nodeName": "node-a"},
                                  "agent-a": {"user": "system:serviceaccount:fabric:agent", "role": "agent",
                                              "nodeName": "node-a"},
                                  "reader": {"user": "reader", "role": "none",
                                             "allow": [{"resource": "pods", "verbs": ["get"],
                                                        "namespaces": ["ml"]}]},
                                  "projected": {"user": "member", "role": "admin",
                                                "audiences": ["fabric.gpustack.ai/pods-api"]},
                                  "deaf": {"user": "member", "statusAudiences": ["other"]}}}, f)
        port_file = os.path.join(self.dir.name, "port")
        self.proc = subprocess.Popen([sys.executable, FAKE, "--port-file", port_file, "--tokens", tokens,
                                      "--bookmark-interval", "0.2", "--history", "5"])
        for _ in range(400):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())

    def tearDown(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.dir.cleanup()

    def call(self, method, path, body=None, token="admin", ctype="application/json"):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Authorization": "Bearer " + token}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = ctype
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        out = json.loads(r.read() or b"null")
        c.close()
        return r.status, out

    def watch(self, path, seconds, token="admin"):
        """Events of a watch that the server ends after `seconds`."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=seconds + 10)
        sep = "&" if "?" in path else "?"
        c.request("GET", "%s%swatch=1&timeoutSeconds=%d" % (path, sep, seconds),
                  headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Transfer-Encoding"), "chunked")
        events = [json.loads(line) for line in r.read().splitlines() if line.strip()]
        c.close()
        return events

    def claim(self, name, finalizers=None):
        c = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": name, "namespace": "ns"},
             "spec": {"devices": {"requests": [{"name": "efa", "exactly": {"deviceClassName": "efa.fabric"}}]}}}
        if finalizers:
            c["metadata"]["finalizers"] = finalizers
        return c

    def test_claim_status_is_a_subresource(self):
        code, created = self.call("POST", V1 + "/namespaces/ns/resourceclaims",
                                  dict(self.claim("c1"), status={"allocation": {}}))
        self.assertEqual(code, 201)
        self.assertNotIn("status", created)  # dropped on create
        created["status"] = {"allocation": {"devices": {"results": []}}}
        code, updated = self.call("PUT", V1 + "/namespaces/ns/resourceclaims/c1", created)
        self.assertEqual(code, 200)
        self.assertNotIn("status", updated)  # ignored by the main resource
        code, updated = self.call("PUT", V1 + "/namespaces/ns/resourceclaims/c1/status", created)
        self.assertEqual(code, 200)
        self.assertIn("allocation", updated["status"])
        self.assertEqual(updated["metadata"]["generation"], 1)  # status does not bump generation
        code, denied = self.call("PUT", V1 + "/namespaces/ns/resourceclaims/c1/status", updated, token="node-a")
        self.assertEqual(code, 403)
        self.assertIn('cannot update resource "resourceclaims/status"', denied["message"])
        code, listed = self.call("GET", V1 + "/resourceclaims?fieldSelector=metadata.namespace%3Dns", token="node-a")
        self.assertEqual((code, len(listed["items"])), (200, 1))

    def test_finalizers_delay_deletion(self):
        self.call("POST", V1 + "/namespaces/ns/resourceclaims", self.claim("c2", ["example.com/x"]))
        code, deleting = self.call("DELETE", V1 + "/namespaces/ns/resourceclaims/c2")
        self.assertEqual(code, 200)
        self.assertIn("deletionTimestamp", deleting["metadata"])
        code, _ = self.call("GET", V1 + "/namespaces/ns/resourceclaims/c2")
        self.assertEqual(code, 200)
        deleting["metadata"]["finalizers"] = []
        code, _ = self.call("PUT", V1 + "/namespaces/ns/resourceclaims/c2", deleting)
        self.assertEqual(code, 200)
        code, gone = self.call("GET", V1 + "/namespaces/ns/resourceclaims/c2")
        self.assertEqual((code, gone["reason"]), (404, "NotFound"))

    def slice(self, node, name=None, labels=None):
        md = {"generateName": node + "-"} if name is None else {"name": name}
        if labels:
            md["labels"] = labels
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": md,
                "spec": {"driver": "fabric.gpustack.ai", "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "efa-0", "attributes": {"kind": {"string": "efa"}}}]}}

    def test_delete_collection_by_node_as_the_kubelet_wipes(self):
        for node, name in (("node-a", "a-0"), ("node-a", "a-1"), ("node-b", "b-0")):
            code, _ = self.call("POST", V1 + "/resourceslices", self.slice(node, name))
            self.assertEqual(code, 201)
        code, gone = self.call("DELETE", V1 + "/resourceslices?fieldSelector=spec.nodeName%3Dnode-a")
        self.assertEqual((code, gone["kind"]), (200, "ResourceSliceList"))
        self.assertEqual(sorted(i["metadata"]["name"] for i in gone["items"]), ["a-0", "a-1"])
        code, left = self.call("GET", V1 + "/resourceslices")
        self.assertEqual([i["metadata"]["name"] for i in left["items"]], ["b-0"])
        # The driver's role has deletecollection on slices; on claims nobody does.
        code, denied = self.call("DELETE", V1 + "/namespaces/ns/resourceclaims", token="node-a")
        self.assertEqual(code, 403)

    def test_generate_name_validation_and_immutability(self):
        code, s = self.call("POST", V1 + "/resourceslices", self.slice("node-a"))
        self.assertEqual(code, 201)
        self.assertTrue(s["metadata"]["name"].startswith("node-a-"))
        self.assertEqual(len(s["metadata"]["name"]), len("node-a-") + 5)
        s["spec"]["driver"] = "other.example.com"
        code, err = self.call("PUT", V1 + "/resourceslices/" + s["metadata"]["name"], s)
        self.assertEqual((code, err["reason"]), (422, "Invalid"))
        self.assertIn("spec.driver: Invalid value", err["message"])
        bad = self.slice("node-a", "bad")
        bad["spec"]["devices"].append({"name": "efa-0"})
        del bad["spec"]["nodeName"]
        code, err = self.call("POST", V1 + "/resourceslices", bad)
        self.assertEqual(code, 422)
        fields = {c["field"] for c in err["details"]["causes"]}
        self.assertIn("spec", fields)  # no node selection
        self.assertIn("spec.devices[1].name", fields)  # duplicate

    def test_watch_follows_selectors_and_sends_bookmarks(self):
        code, s = self.call("POST", V1 + "/resourceslices", self.slice("node-a", "s1", {"tier": "a"}))
        rv = s["metadata"]["resourceVersion"]
        s["metadata"]["labels"] = {"tier": "b"}
        self.call("PUT", V1 + "/resourceslices/s1", s)
        events = self.watch(V1 + "/resourceslices?labelSelector=tier%3Da&allowWatchBookmarks=true&resourceVersion="
                            + rv, 1)
        types = [e["type"] for e in events]
        self.assertEqual(types[0], "DELETED")  # it left the selector
        self.assertIn("BOOKMARK", types)
        bookmark = [e for e in events if e["type"] == "BOOKMARK"][-1]["object"]
        self.assertEqual(set(bookmark), {"kind", "apiVersion", "metadata"})
        self.assertGreater(int(bookmark["metadata"]["resourceVersion"]), int(rv))
        # Without allowWatchBookmarks: none.
        self.assertNotIn("BOOKMARK", [e["type"] for e in self.watch(V1 + "/resourceslices", 1)])

    def test_watch_too_old_is_an_error_event(self):
        code, s = self.call("POST", V1 + "/resourceslices", self.slice("node-a", "s2"))
        first = s["metadata"]["resourceVersion"]
        for i in range(6):  # --history 5
            s["spec"]["pool"]["generation"] = i + 2
            code, s = self.call("PUT", V1 + "/resourceslices/s2", s)
            self.assertEqual(code, 200)
        events = self.watch(V1 + "/resourceslices?resourceVersion=" + first, 5)
        self.assertEqual(len(events), 1)
        self.assertEqual(events[0]["type"], "ERROR")
        self.assertEqual((events[0]["object"]["code"], events[0]["object"]["reason"]), (410, "Expired"))

    def test_apply_conflicts_without_force(self):
        apply = "application/apply-patch+yaml"
        code, _ = self.call("PATCH", V1 + "/resourceslices/s3?fieldManager=a", self.slice("node-a", "s3"), ctype=apply)
        self.assertEqual(code, 201)
        other = self.slice("node-a", "s3")
        other["spec"]["pool"]["generation"] = 9
        code, err = self.call("PATCH", V1 + "/resourceslices/s3?fieldManager=b", other, ctype=apply)
        self.assertEqual((code, err["reason"]), (409, "Conflict"))
        self.assertIn('conflict with "a"', err["message"])
        code, ok = self.call("PATCH", V1 + "/resourceslices/s3?fieldManager=b&force=true", other, ctype=apply)
        self.assertEqual((code, ok["spec"]["pool"]["generation"]), (200, 9))
        code, err = self.call("PATCH", V1 + "/resourceslices/s3", other, ctype=apply)
        self.assertEqual((code, err["message"]), (400, "fieldManager is required for apply requests"))
        code, err = self.call("PATCH", V1 + "/resourceslices/s3", other, ctype="application/merge-patch+json")
        self.assertEqual(code, 415)

    def test_unknown_paths_and_bad_bodies_answer_status(self):
        for method, path, body in (("GET", "/apis/resource.k8s.io/v1/pods", None),
                                   ("GET", "/api/v1/nodes", None),
                                   ("POST", V1 + "/resourceslices", ["not", "an", "object"])):
            code, st = self.call(method, path, body)
            self.assertGreaterEqual(code, 400)
            self.assertEqual(st["kind"], "Status")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("POST", V1 + "/resourceslices", body=b"\xff\xfe{", headers={"Authorization": "Bearer admin"})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())["reason"]), (400, "BadRequest"))
        c.close()

    # -- core v1 Pods and events.k8s.io/v1 Events (fake_core.py)

    def pod(self, name, node, ns="ml"):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "x"}]},
                "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}}

    def inject(self, obj):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("POST", "/fake/objects", body=json.dumps(obj).encode())
        r = c.getresponse()
        out = json.loads(r.read())
        c.close()
        return out

    def fabric(self, status, reason="Attached"):
        return {"type": "fabric.gpustack.ai/FabricAttached", "status": status, "reason": reason,
                "lastTransitionTime": "2026-12-02T00:00:00Z"}

    def test_pods_of_one_node_and_status_patches_merge_conditions_by_type(self):
        a = self.inject(self.pod("m0", "node-a"))
        self.inject(self.pod("m1", "node-b"))
        code, listed = self.call("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", token="agent-a")
        self.assertEqual((code, [p["metadata"]["name"] for p in listed["items"]]), (200, ["m0"]))
        smp = "application/strategic-merge-patch+json"
        code, patched = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                                  {"metadata": {"uid": a["metadata"]["uid"]},
                                   "status": {"conditions": [self.fabric("True")]}}, token="agent-a", ctype=smp)
        self.assertEqual(code, 200, patched)
        types = [c["type"] for c in patched["status"]["conditions"]]
        self.assertEqual(types, ["Ready", "PodScheduled", "fabric.gpustack.ai/FabricAttached"])
        # The kubelet's own patch (its conditions, with $setElementOrder) keeps ours.
        code, patched = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                                  {"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                                              "conditions": [{"type": "Ready", "status": "False"}]}}, ctype=smp)
        self.assertEqual(code, 200, patched)
        self.assertIn(self.fabric("True"), patched["status"]["conditions"])
        self.assertIn({"type": "Ready", "status": "False"}, patched["status"]["conditions"])
        # A list directive where the Pod has no such list is the real server's 500.
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                              {"$setElementOrder/conditions": [{"type": "Ready"}]}, ctype=smp)
        self.assertEqual(code, 500)
        self.assertIn('unable to find api field in struct Pod for the json field "conditions"', err["message"])
        # A stale UID (the Pod was recreated) is a conflict.
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                              {"metadata": {"uid": "other"}, "status": {}}, token="agent-a", ctype=smp)
        self.assertEqual((code, err["reason"]), (409, "Conflict"))
        self.assertIn("Precondition failed: UID in precondition", err["message"])
        # The policy: another node's Pod, or a condition that is not ours.
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m1/status",
                              {"status": {"conditions": [self.fabric("True")]}}, token="agent-a", ctype=smp)
        self.assertEqual(code, 422)
        self.assertIn("may not write the status of a Pod on node node-b", err["message"])
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                              {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, token="agent-a",
                              ctype=smp)
        self.assertEqual(code, 422)
        self.assertIn("only its conditions fabric.gpustack.ai/FabricAttached and", err["message"])
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                              {"status": {"conditions": [{"type": "fabric.gpustack.ai/Other", "status": "True"}]}},
                              token="agent-a", ctype=smp)
        self.assertEqual(code, 422)
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0/status",
                              {"status": {"phase": "Failed"}}, token="agent-a", ctype=smp)
        self.assertEqual(code, 422)
        # RBAC: no spec update, no delete.
        code, err = self.call("PATCH", "/api/v1/namespaces/ml/pods/m0", {"metadata": {"labels": {"x": "y"}}},
                              token="agent-a", ctype=smp)
        self.assertEqual(code, 403)
        self.assertIn('cannot patch resource "pods" in API group ""', err["message"])
        code, _ = self.call("DELETE", "/api/v1/namespaces/ml/pods/m0", token="agent-a")
        self.assertEqual(code, 403)

    def test_pod_watch_by_node(self):
        self.inject(self.pod("w0", "node-a"))
        self.inject(self.pod("w1", "node-b"))
        events = self.watch("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", 1, token="agent-a")
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"], e["object"]["kind"]) for e in events],
                         [("ADDED", "w0", "Pod")])

    def event(self, name, **over):
        e = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": "ml"},
             "eventTime": "2026-12-02T00:00:00.000000Z", "reportingController": "fabric.gpustack.ai/agent",
             "reportingInstance": "node-a", "action": "Observe", "reason": "FabricFallback", "type": "Warning",
             "note": "tcp", "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "m0"}}
        e.update(over)
        return e

    def test_events_validate_and_grow_a_series(self):
        ev = "/apis/events.k8s.io/v1/namespaces/ml/events"
        code, created = self.call("POST", ev, self.event("m0.1"), token="agent-a")
        self.assertEqual(code, 201, created)
        code, err = self.call("POST", ev, self.event("m0.2", type="Bad", action=""), token="agent-a")
        self.assertEqual(code, 422)
        self.assertIn("action: Required value", err["message"])
        self.assertIn('type: Unsupported value: "Bad"', err["message"])
        merge = "application/merge-patch+json"
        code, patched = self.call("PATCH", ev + "/m0.1", {"series": {"count": 2, "lastObservedTime":
                                                                     "2026-12-02T00:01:00.000000Z"}},
                                  token="agent-a", ctype=merge)
        self.assertEqual((code, patched["series"]["count"]), (200, 2))
        code, err = self.call("PATCH", ev + "/m0.1", {"note": "changed"}, token="agent-a", ctype=merge)
        self.assertEqual(code, 422)
        self.assertIn("note: Invalid value: field is immutable", err["message"])
        code, err = self.call("PATCH", ev + "/m0.1", {"series": {"count": 1}}, token="agent-a", ctype=merge)
        self.assertEqual(code, 422)
        code, _ = self.call("DELETE", ev + "/m0.1", token="agent-a")
        self.assertEqual(code, 403)

    def test_token_and_subject_access_reviews(self):
        tr = "/apis/authentication.k8s.io/v1/tokenreviews"
        code, r = self.call("POST", tr, {"spec": {"token": "reader"}}, token="agent-a")
        self.assertEqual((code, r["status"]["authenticated"], r["status"]["user"]["username"]), (201, True, "reader"))
        code, r = self.call("POST", tr, {"spec": {"token": "nope"}}, token="agent-a")
        self.assertEqual((code, r["status"]["authenticated"]), (201, False))
        code, _ = self.call("POST", tr, {"spec": {"token": "reader"}}, token="reader")
        self.assertEqual(code, 403)  # only with create on tokenreviews
        # Audiences: the reviewed token must carry one the review names (none: the API server's).
        pods_api = ["fabric.gpustack.ai/pods-api"]
        code, r = self.call("POST", tr, {"spec": {"token": "projected", "audiences": pods_api}}, token="agent-a")
        self.assertEqual((r["status"]["authenticated"], r["status"]["audiences"]), (True, pods_api))
        code, r = self.call("POST", tr, {"spec": {"token": "projected"}}, token="agent-a")
        self.assertFalse(r["status"]["authenticated"])
        self.assertIn("is invalid for the target audiences", r["status"]["error"])
        code, r = self.call("POST", tr, {"spec": {"token": "reader", "audiences": pods_api}}, token="agent-a")
        self.assertFalse(r["status"]["authenticated"])
        code, r = self.call("POST", tr, {"spec": {"token": "reader"}}, token="agent-a")
        self.assertEqual(r["status"]["audiences"], ["https://kubernetes.default.svc"])
        code, r = self.call("POST", tr, {"spec": {"token": "deaf", "audiences": pods_api}}, token="agent-a")
        self.assertEqual((r["status"]["authenticated"], r["status"]["audiences"]), (True, ["other"]))
        # A token for another audience does not call the API server itself.
        code, _ = self.call("GET", "/api/v1/pods", token="projected")
        self.assertEqual(code, 401)
        sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

        def allowed(user, verb, ns):
            code, r = self.call("POST", sar, {"spec": {"user": user, "resourceAttributes": {
                "verb": verb, "resource": "pods", "namespace": ns}}}, token="agent-a")
            self.assertEqual(code, 201)
            return r["status"]["allowed"]
        self.assertTrue(allowed("reader", "get", "ml"))
        self.assertFalse(allowed("reader", "get", "other"))
        self.assertFalse(allowed("reader", "list", ""))
        self.assertTrue(allowed("admin", "list", ""))
        self.assertFalse(allowed("nobody", "get", "ml"))


if __name__ == "__main__":
    unittest.main()
