// HttpKubeClient and Watch against tools/fake-apiserver over HTTPS: a python3
// child process with a certificate made by openssl here. Skips (only) when
// python3 or openssl is missing.
#include "agent/kubeapi/http_kube_client.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/kubeapi/api_status.h"
#include "agent/kubeapi/watch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::kubeapi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using json = nlohmann::json;

constexpr char kSlices[] = "/apis/resource.k8s.io/v1/resourceslices";
constexpr char kDriver[] = "fabric.gpustack.ai";

void WriteFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << content;
  ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0) << path;  // like a projected volume: a new inode
}

json Slice(const std::string& name, const std::string& node, int devices = 1) {
  json devs = json::array();
  for (int i = 0; i < devices; ++i) {
    devs.push_back({{"name", "mlx5-" + std::to_string(i)},
                    {"attributes", {{"kind", {{"string", "rdma"}}}, {"numaNode", {{"int", 0}}}}}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}, {"labels", {{"app", "fabric"}}}}},
          {"spec",
           {{"driver", kDriver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", devs}}}};
}

ListOptions Select(const std::string& labels, const std::string& fields) {
  ListOptions o;
  o.label_selector = labels;
  o.field_selector = fields;
  return o;
}

DeleteOptions WithUid(const std::string& uid) {
  DeleteOptions o;
  o.uid = uid;
  return o;
}

using fabric::testing::FakeApiServer;

class Recorder : public WatchHandler {
 public:
  void OnList(const ObjectList& l) override {
    std::lock_guard<std::mutex> lock(mu_);
    names_.clear();
    for (const auto& it : l.items) names_.insert(it["metadata"]["name"].get<std::string>());
    ++lists_;
    cv_.notify_all();
  }
  void OnEvent(const WatchEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = e.object["metadata"]["name"];
    if (e.type == WatchEvent::Type::kDeleted) {
      names_.erase(name);
    } else {
      names_.insert(name);
    }
    events_.push_back(std::string(WatchEventTypeName(e.type)) + " " + name);
    cv_.notify_all();
  }
  void OnError(const absl::Status& s, absl::Duration d) override {
    std::lock_guard<std::mutex> lock(mu_);
    errors_.push_back(s);
    cv_.notify_all();
  }
  // Waits up to 20 s for `pred` (called under the lock).
  template <typename P>
  bool WaitFor(P pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return pred(*this); });
  }
  bool Has(const std::string& n) const { return names_.count(n) > 0; }
  std::set<std::string> names_;
  std::vector<std::string> events_;
  std::vector<absl::Status> errors_;
  int lists_ = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// Runs a Watch on its own thread; stops and joins it on scope exit too, so a
// failed ASSERT cannot leave a joinable thread behind.
class RunningWatch {
 public:
  explicit RunningWatch(Watch& w) : w_(w), t_([&w] { EXPECT_OK(w.Run()); }) {}
  ~RunningWatch() { StopAndJoin(); }
  void StopAndJoin() {
    w_.Stop();
    if (t_.joinable()) t_.join();
  }

 private:
  Watch& w_;
  std::thread t_;
};

class KubeApiFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fabric::testing::FakeApiServerAvailable())
      GTEST_SKIP() << "python3 or openssl is not installed";
    const std::string d = dir_.path();
    for (const char* name : {"server", "other"}) {
      const std::string cmd = absl::StrCat(
          "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=fake-apiserver -addext "
          "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout ",
          d, "/", name, ".key -out ", d, "/", name, ".crt >/dev/null 2>&1");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    WriteTokens({{"admin-token", {{"user", "kubernetes-admin"}, {"role", "admin"}}},
                 {"node-a-token",
                  {{"user", "system:serviceaccount:fabric:fabric-dra"}, {"nodeName", "node-a"}}},
                 {"node-less-token", {{"user", "system:serviceaccount:fabric:fabric-dra"}}}});
    server_ = std::make_unique<FakeApiServer>(d, std::vector<std::string>{});
    ASSERT_TRUE(server_->Start()) << "fake-apiserver did not start";
    admin_ = Client("admin-token");
    node_a_ = Client("node-a-token");
  }

  void WriteTokens(const json& tokens) {
    WriteFile(dir_.path() + "/tokens.json", json{{"tokens", tokens}}.dump());
  }

  std::unique_ptr<HttpKubeClient> Client(const std::string& token,
                                         const std::string& ca = "server.crt") {
    const std::string token_file = dir_.path() + "/" + token;
    WriteFile(token_file, token + "\n");
    KubeConfig c;
    c.server = server_->url();
    c.token_file = token_file;
    c.ca_file = dir_.path() + "/" + ca;
    c.request_timeout = absl::Seconds(20);
    auto client = HttpKubeClient::Create(c);
    EXPECT_OK(client);
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::string SlicePath(const std::string& name) {
    auto p = ObjectPath("/apis/resource.k8s.io/v1", "resourceslices", "", name);
    EXPECT_OK(p);
    return p.value_or("");
  }

  WatchOptions FastWatch() {
    WatchOptions o;
    o.collection_path = kSlices;
    o.initial_backoff = absl::Milliseconds(50);
    o.max_backoff = absl::Milliseconds(400);
    return o;
  }

  testing::TempDir dir_{"kapi"};
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<HttpKubeClient> admin_, node_a_;
};

TEST_F(KubeApiFakeServerTest, CreateGetListUpdateDelete) {
  auto created = node_a_->Create(kSlices, Slice("node-a-fabric-0", "node-a"));
  ASSERT_OK(created);
  const std::string uid = (*created)["metadata"]["uid"];
  const std::string rv1 = (*created)["metadata"]["resourceVersion"];
  EXPECT_EQ((*created)["metadata"]["generation"], 1);

  auto again = node_a_->Create(kSlices, Slice("node-a-fabric-0", "node-a"));
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(again.status().message(), HasSubstr("already exists"));

  auto got = node_a_->Get(SlicePath("node-a-fabric-0"));
  ASSERT_OK(got);
  EXPECT_EQ((*got)["spec"]["devices"][0]["name"], "mlx5-0");

  ASSERT_OK(admin_->Create(kSlices, Slice("node-b-fabric-0", "node-b")));
  auto mine = node_a_->List(kSlices, Select("", "spec.nodeName=node-a"));
  ASSERT_OK(mine);
  ASSERT_THAT(mine->items, SizeIs(1));
  EXPECT_EQ(mine->items[0]["metadata"]["name"], "node-a-fabric-0");
  EXPECT_FALSE(mine->resource_version.empty());
  auto by_driver =
      node_a_->List(kSlices, Select("app in (fabric,x)", std::string("spec.driver=") + kDriver));
  ASSERT_OK(by_driver);
  EXPECT_THAT(by_driver->items, SizeIs(2));
  EXPECT_THAT(node_a_->List(kSlices, Select("", "spec.bogus=1")),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // Update at the version read: accepted, the spec change bumps generation.
  json updated = *got;
  updated["spec"]["devices"][0]["name"] = "mlx5-9";
  auto u1 = node_a_->Update(SlicePath("node-a-fabric-0"), updated);
  ASSERT_OK(u1);
  EXPECT_EQ((*u1)["metadata"]["generation"], 2);
  EXPECT_NE((*u1)["metadata"]["resourceVersion"], rv1);
  // The same stale object again: 409 Conflict -> kAborted naming the object.
  auto stale = node_a_->Update(SlicePath("node-a-fabric-0"), updated);
  EXPECT_THAT(stale, StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(stale.status().message(), HasSubstr("update resourceslices node-a-fabric-0"));
  EXPECT_THAT(stale.status().message(), HasSubstr("the object has been modified"));
  // No resourceVersion at all: refused by the client (a blind overwrite).
  updated["metadata"].erase("resourceVersion");
  EXPECT_THAT(node_a_->Update(SlicePath("node-a-fabric-0"), updated),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // The server validates like the real one: > 128 devices is 422.
  json big = *u1;
  big["spec"] = Slice("x", "node-a", 129)["spec"];
  auto too_big = node_a_->Update(SlicePath("node-a-fabric-0"), big);
  EXPECT_THAT(too_big, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(too_big.status().message(), HasSubstr("must have at most 128 items"));

  EXPECT_THAT(node_a_->Delete(SlicePath("node-a-fabric-0"), WithUid("not-the-uid")),
              StatusIs(absl::StatusCode::kAborted));
  ASSERT_OK(node_a_->Delete(SlicePath("node-a-fabric-0"), WithUid(uid)));
  auto gone = node_a_->Get(SlicePath("node-a-fabric-0"));
  EXPECT_THAT(gone, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(gone.status().message(), HasSubstr("get resourceslices node-a-fabric-0"));
  EXPECT_THAT(gone.status().message(), HasSubstr("not found"));
}

TEST_F(KubeApiFakeServerTest, ServerSideApply) {
  auto a1 = node_a_->Apply(SlicePath("node-a-fabric-0"), Slice("node-a-fabric-0", "node-a"),
                           "fabric-agent");
  ASSERT_OK(a1);
  EXPECT_EQ((*a1)["metadata"]["generation"], 1);
  json changed = Slice("node-a-fabric-0", "node-a", 2);
  auto a2 = node_a_->Apply(SlicePath("node-a-fabric-0"), changed, "fabric-agent");
  ASSERT_OK(a2);
  EXPECT_EQ((*a2)["metadata"]["uid"], (*a1)["metadata"]["uid"]);
  EXPECT_EQ((*a2)["metadata"]["generation"], 2);
  EXPECT_THAT((*a2)["spec"]["devices"], SizeIs(2));
  // Applying the same again changes nothing, not even the version.
  auto a3 = node_a_->Apply(SlicePath("node-a-fabric-0"), changed, "fabric-agent");
  ASSERT_OK(a3);
  EXPECT_EQ((*a3)["metadata"]["resourceVersion"], (*a2)["metadata"]["resourceVersion"]);

  bool saw_apply = false;
  for (const json& r : server_->Log()) {
    if (r["method"] == "PATCH") {
      saw_apply = true;
      EXPECT_EQ(r["contentType"], "application/apply-patch+yaml");
      EXPECT_EQ(r["query"]["fieldManager"], "fabric-agent");
      EXPECT_EQ(r["query"]["force"], "true");
    }
  }
  EXPECT_TRUE(saw_apply);
}

TEST_F(KubeApiFakeServerTest, NodeRestrictionAndReadOnlyClaims) {
  // Another node's slice: the admission policy refuses create, update, delete.
  auto other = node_a_->Create(kSlices, Slice("node-b-fabric-0", "node-b"));
  EXPECT_THAT(other,
              StatusIs(absl::StatusCode::kInvalidArgument));  // 422 Invalid, as the charts' policy
  EXPECT_THAT(other.status().message(),
              HasSubstr("may not modify resourceslices on node 'node-b'"));
  EXPECT_THAT(other.status().message(), HasSubstr("ValidatingAdmissionPolicy"));
  auto theirs = admin_->Create(kSlices, Slice("node-b-fabric-0", "node-b"));
  ASSERT_OK(theirs);
  EXPECT_THAT(node_a_->Update(SlicePath("node-b-fabric-0"), *theirs),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(node_a_->Apply(SlicePath("node-b-fabric-0"), Slice("node-b-fabric-0", "node-b"),
                             "fabric-agent"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(node_a_->Delete(SlicePath("node-b-fabric-0"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(admin_->Get(SlicePath("node-b-fabric-0")));
  // A token bound to no node may write no slice.
  auto nodeless = Client("node-less-token");
  EXPECT_THAT(nodeless->Create(kSlices, Slice("node-a-fabric-1", "node-a")).status().message(),
              HasSubstr("no node association found"));

  // Claims: readable, never writable by the driver.
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"name", "claim-1"}, {"namespace", "team-a"}}},
                {"spec", {{"devices", {{"requests", json::array()}}}}},
                {"status",
                 {{"allocation",
                   {{"devices",
                     {{"results",
                       {{{"request", "efa"},
                         {"driver", kDriver},
                         {"pool", "node-a"},
                         {"device", "mlx5-0"}}}}}}}}}}};
  auto [code, injected] = server_->Control("POST", "/fake/claims", claim);
  ASSERT_EQ(code, 201) << injected.dump();
  auto path = ObjectPath("/apis/resource.k8s.io/v1", "resourceclaims", "team-a", "claim-1");
  ASSERT_OK(path);
  auto got = node_a_->Get(*path);
  ASSERT_OK(got);
  EXPECT_EQ((*got)["status"]["allocation"]["devices"]["results"][0]["device"], "mlx5-0");
  auto upd = node_a_->Update(*path, *got);
  EXPECT_THAT(upd, StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(upd.status().message(), HasSubstr("cannot update resource \"resourceclaims\""));
  auto status_path =
      ObjectPath("/apis/resource.k8s.io/v1", "resourceclaims", "team-a", "claim-1", "status");
  EXPECT_THAT(node_a_->Update(*status_path, *got), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(node_a_->Delete(*path, {}), StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(KubeApiFakeServerTest, WatchResumesAfterTheServerEndsTheStream) {
  Recorder rec;
  Watch w(node_a_.get(), FastWatch(), &rec);
  RunningWatch run(w);
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.lists_ == 1; }));
  ASSERT_OK(node_a_->Create(kSlices, Slice("node-a-fabric-0", "node-a")));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.Has("node-a-fabric-0"); }));
  const std::string rv_after_a = w.resource_version();

  // Ends the open watch (retrying until the reconnected one is registered).
  auto close_watch = [&](const std::string& query) {
    for (int i = 0; i < 400; ++i) {
      auto [code, body] = server_->Control("POST", "/fake/close-watches" + query);
      ASSERT_EQ(code, 200);
      if (body["closed"] == 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "no watch to close";
  };
  // A clean end (as at timeoutSeconds), then an abrupt one (a crash).
  close_watch("");
  ASSERT_OK(node_a_->Create(kSlices, Slice("node-a-fabric-1", "node-a")));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.Has("node-a-fabric-1"); }));
  close_watch("?abrupt=1");
  ASSERT_OK(node_a_->Delete(SlicePath("node-a-fabric-0"), {}));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return !r.Has("node-a-fabric-0"); }));
  run.StopAndJoin();
  EXPECT_EQ(w.lists(), 1u);  // resumed, never re-listed
  EXPECT_GE(w.streams(), 3u);
  // The second watch started where the first left off.
  std::vector<std::string> watch_rvs;
  for (const json& r : server_->Log()) {
    if (r["query"].contains("watch")) watch_rvs.push_back(r["query"].value("resourceVersion", ""));
  }
  ASSERT_GE(watch_rvs.size(), 3u);
  EXPECT_GE(std::stoll(watch_rvs[1]), std::stoll(rv_after_a));
  for (const json& r : server_->Log()) {
    if (!r["query"].contains("watch")) continue;
    EXPECT_EQ(r["query"].value("allowWatchBookmarks", ""), "true");
    const int timeout_s = std::stoi(r["query"].value("timeoutSeconds", "0"));
    EXPECT_GE(timeout_s, 300);  // 5-10 min, jittered
    EXPECT_LE(timeout_s, 600);
  }
}

TEST_F(KubeApiFakeServerTest, RelistsOn410AfterTheServerCompacted) {
  Recorder rec;
  Watch w(node_a_.get(), FastWatch(), &rec);
  RunningWatch run(w);
  ASSERT_OK(node_a_->Create(kSlices, Slice("node-a-fabric-0", "node-a")));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.Has("node-a-fabric-0"); }));
  // Keep the reflector off the server while things change and history goes.
  ASSERT_EQ(
      server_->Control("POST", "/fake/fail?path=resourceslices&method=GET&code=503&count=100000")
          .first,
      200);
  server_->Control("POST", "/fake/close-watches");
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return !r.errors_.empty(); }));
  ASSERT_OK(admin_->Create(kSlices, Slice("node-a-fabric-1", "node-a")));
  ASSERT_OK(admin_->Delete(SlicePath("node-a-fabric-0"), {}));
  server_->Control("POST", "/fake/compact");
  server_->Control("DELETE", "/fake/fail");
  // The resumed watch gets ERROR 410; the re-list shows the new state.
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.lists_ >= 2; }));
  ASSERT_TRUE(rec.WaitFor(
      [](Recorder& r) { return r.Has("node-a-fabric-1") && !r.Has("node-a-fabric-0"); }));
  run.StopAndJoin();
  EXPECT_EQ(w.lists(), 2u);
  EXPECT_THAT(rec.errors_[0], StatusIs(absl::StatusCode::kUnavailable));  // the injected 503
}

TEST_F(KubeApiFakeServerTest, BacksOffWhileTheServerIsDownThenRelists) {
  Recorder rec;
  std::mutex mu;
  std::vector<absl::Duration> sleeps;
  WatchOptions o = FastWatch();
  Canceller sleeper;
  o.sleep = [&](absl::Duration d) {
    {
      std::lock_guard<std::mutex> lock(mu);
      sleeps.push_back(d);
    }
    return sleeper.SleepFor(d);
  };
  Watch w(node_a_.get(), o, &rec);
  RunningWatch run(w);
  ASSERT_OK(node_a_->Create(kSlices, Slice("node-a-fabric-0", "node-a")));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.Has("node-a-fabric-0"); }));
  const int port = server_->port();
  server_->Kill(SIGKILL);
  // Error k+1 comes after sleep k: six errors mean five recorded sleeps.
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.errors_.size() >= 6; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_GE(sleeps.size(), 5u);
    // Equal jitter: each wait within [base/2, base], the base doubling to the cap.
    EXPECT_GE(sleeps[0], absl::Milliseconds(25));
    EXPECT_LE(sleeps[0], absl::Milliseconds(50));
    EXPECT_GE(sleeps[4], absl::Milliseconds(200));
    EXPECT_LE(sleeps[4], absl::Milliseconds(400));
  }
  // A new server (empty, later versions: our version is gone) on the same port.
  server_ = std::make_unique<FakeApiServer>(dir_.path(),
                                            std::vector<std::string>{"--initial-rv", "50000"});
  ASSERT_TRUE(server_->Start(port));
  ASSERT_OK(admin_->Create(kSlices, Slice("node-a-fabric-7", "node-a")));
  ASSERT_TRUE(rec.WaitFor(
      [](Recorder& r) { return r.Has("node-a-fabric-7") && !r.Has("node-a-fabric-0"); }));
  run.StopAndJoin();
  EXPECT_GE(w.lists(), 2u);
}

TEST_F(KubeApiFakeServerTest, HostileWatchStreamRelistsWithANamedError) {
  Recorder rec;
  Watch w(node_a_.get(), FastWatch(), &rec);
  RunningWatch run(w);
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.lists_ == 1; }));
  int last_watcher = 0;
  auto inject = [&](const std::string& path, const std::string& raw, int lists_after) {
    // Into the stream opened after the last one only (the server may not yet
    // have noticed that the client left the previous one).
    for (int i = 0; i < 400; ++i) {
      auto [code, body] =
          server_->ControlRaw("POST",
                              path + (path.find('?') == std::string::npos ? "?" : "&") +
                                  "after=" + std::to_string(last_watcher),
                              raw);
      ASSERT_EQ(code, 200);
      if (!body["watchers"].empty()) {
        last_watcher = body["watchers"].back();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(rec.WaitFor([&](Recorder& r) { return r.lists_ == lists_after; })) << path;
  };
  inject("/fake/watch-raw", "this is not json\n", 2);
  inject("/fake/watch-raw",
         "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\xfe\",\"resourceVersion\":"
         "\"5\"}}}\n",
         3);
  inject("/fake/watch-raw", "{\"type\":\"EXPLODED\",\"object\":{}}\n", 4);
  inject("/fake/watch-raw?repeat=" + std::to_string((16 << 20) + 10) + "&byte=x", "", 5);
  // Still watching after all that.
  ASSERT_OK(node_a_->Create(kSlices, Slice("node-a-fabric-3", "node-a")));
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.Has("node-a-fabric-3"); }));
  run.StopAndJoin();
  ASSERT_EQ(rec.errors_.size(), 4u);
  EXPECT_THAT(rec.errors_[0], StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(rec.errors_[0].message()), HasSubstr("not JSON"));
  EXPECT_THAT(rec.errors_[1], StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(rec.errors_[1].message()), Not(HasSubstr("\xff")));
  EXPECT_THAT(std::string(rec.errors_[2].message()), HasSubstr("unknown event type"));
  EXPECT_THAT(rec.errors_[3], StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(std::string(rec.errors_[3].message()), HasSubstr("longer than 16777216 bytes"));
  for (const auto& e : rec.errors_)
    EXPECT_THAT(std::string(e.message()), HasSubstr("watch resourceslices"));
}

TEST_F(KubeApiFakeServerTest, StopEndsABlockedStreamPromptly) {
  Recorder rec;
  Watch w(node_a_.get(), FastWatch(), &rec);
  RunningWatch run(w);
  ASSERT_TRUE(rec.WaitFor([](Recorder& r) { return r.lists_ == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // inside the stream now
  const auto t0 = std::chrono::steady_clock::now();
  run.StopAndJoin();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(KubeApiFakeServerTest, TokenRotation) {
  const std::string token_file = dir_.path() + "/rotating";
  WriteFile(token_file, "old-token\n");
  WriteTokens({{"admin-token", {{"user", "kubernetes-admin"}, {"role", "admin"}}},
               {"old-token", {{"user", "sa"}, {"nodeName", "node-a"}}}});
  KubeConfig c;
  c.server = server_->url();
  c.token_file = token_file;
  c.ca_file = dir_.path() + "/server.crt";
  auto client = HttpKubeClient::Create(c);
  ASSERT_OK(client);
  ASSERT_OK((*client)->List(kSlices, {}));
  // The kubelet rotates the projected token; the old one is revoked.
  WriteTokens({{"new-token", {{"user", "sa"}, {"nodeName", "node-a"}}}});
  auto denied = (*client)->List(kSlices, {});
  EXPECT_THAT(denied, StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(denied.status().message(), Not(HasSubstr("old-token")));
  WriteFile(token_file, "new-token\n");
  EXPECT_OK((*client)->List(kSlices, {}));
}

TEST_F(KubeApiFakeServerTest, WrongCaFailsWithAClearError) {
  auto wrong = Client("admin-token", "other.crt");
  auto r = wrong->List(kSlices, {});
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(r.status().message(), HasSubstr("list resourceslices"));
  EXPECT_THAT(r.status().message(), HasSubstr("TLS"));
  EXPECT_THAT(r.status().message(), HasSubstr("other.crt"));
  auto missing = Client("admin-token", "no-such-ca.crt");
  EXPECT_THAT(missing->List(kSlices, {}), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace fabric::kubeapi
