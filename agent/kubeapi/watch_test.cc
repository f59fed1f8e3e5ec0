// The reflector against an in-process scripted client: what it asks for and
// when it sleeps. The HTTP client and the fake API server are tested in
// http_kube_client_test.cc.
#include "agent/kubeapi/watch.h"

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::kubeapi {
namespace {

using ::testing::ElementsAre;

std::string Ev(const std::string& type, const std::string& name, const std::string& rv) {
  return nlohmann::json{{"type", type},
                        {"object", {{"metadata", {{"name", name}, {"resourceVersion", rv}}}}}}
      .dump();
}

struct ScriptedStream {
  std::vector<std::string> lines;
  absl::Status end = absl::OkStatus();
  bool block_until_cancelled = false;
};

class ScriptedClient : public KubeClient {
 public:
  std::deque<absl::StatusOr<ObjectList>> lists;
  std::deque<ScriptedStream> streams;
  std::vector<std::string> watch_rvs;
  std::vector<std::string> list_rvs;  // each List's resourceVersion parameter
  int list_calls = 0;
  Watch* stop_when_exhausted = nullptr;

  absl::StatusOr<nlohmann::json> Get(absl::string_view) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<ObjectList> List(absl::string_view, const ListOptions& o) override {
    ++list_calls;
    list_rvs.push_back(o.resource_version);
    if (lists.empty()) {
      if (stop_when_exhausted) stop_when_exhausted->Stop();
      return absl::UnavailableError("script exhausted");
    }
    auto r = lists.front();
    lists.pop_front();
    return r;
  }
  absl::StatusOr<nlohmann::json> Create(absl::string_view, const nlohmann::json&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<nlohmann::json> Update(absl::string_view, const nlohmann::json&) override {
    return absl::UnimplementedError("");
  }
  absl::Status Delete(absl::string_view, const DeleteOptions&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<nlohmann::json> Patch(absl::string_view, const nlohmann::json&,
                                       PatchType) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<nlohmann::json> Apply(absl::string_view, const nlohmann::json&, absl::string_view,
                                       bool) override {
    return absl::UnimplementedError("");
  }
  absl::Status StreamWatch(absl::string_view, const WatchRequest& req,
                           const WatchLineHandler& on_line, Canceller* cancel) override {
    watch_rvs.push_back(req.resource_version);
    if (streams.empty()) {
      if (stop_when_exhausted) stop_when_exhausted->Stop();
      return absl::UnavailableError("script exhausted");
    }
    ScriptedStream s = streams.front();
    streams.pop_front();
    for (const auto& l : s.lines) {
      if (!on_line(l)) return absl::OkStatus();
    }
    if (s.block_until_cancelled) {
      while (cancel->SleepFor(absl::Seconds(10))) {
      }
      return absl::CancelledError("cancelled");
    }
    return s.end;
  }
};

class Recorder : public WatchHandler {
 public:
  std::vector<std::string> log;
  std::vector<absl::StatusCode> errors;
  void OnList(const ObjectList& l) override {
    log.push_back("list@" + l.resource_version + ":" + std::to_string(l.items.size()));
  }
  void OnEvent(const WatchEvent& e) override {
    log.push_back(std::string(WatchEventTypeName(e.type)) + " " +
                  e.object["metadata"]["name"].get<std::string>() + "@" + e.resource_version);
  }
  void OnError(const absl::Status& s, absl::Duration) override { errors.push_back(s.code()); }
};

ObjectList MakeList(const std::string& rv, int n) {
  ObjectList l;
  l.resource_version = rv;
  for (int i = 0; i < n; ++i)
    l.items.push_back({{"metadata", {{"name", "o" + std::to_string(i)}}}});
  return l;
}

struct Harness {
  ScriptedClient client;
  Recorder rec;
  std::vector<absl::Duration> sleeps;
  absl::Time now = absl::UnixEpoch();
  std::unique_ptr<Watch> watch;
  void Make(WatchOptions o = {}) {
    o.collection_path = "/apis/resource.k8s.io/v1/resourceslices";
    // Each stream "lasts" 10 s of fake time, so it counts as healthy.
    o.now = [this] { return now += absl::Seconds(5); };
    o.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      return true;
    };
    o.random = [] { return 1.0; };  // the top of the jitter range
    watch = std::make_unique<Watch>(&client, o, &rec);
    client.stop_when_exhausted = watch.get();
  }
};

TEST(Watch, ResumesFromLastResourceVersionWhenStreamEnds) {
  Harness h;
  h.client.lists.push_back(MakeList("10", 2));
  h.client.streams.push_back({{Ev("ADDED", "a", "11"), Ev("MODIFIED", "a", "12")}});
  h.client.streams.push_back({{Ev("BOOKMARK", "", "20")}});
  h.client.streams.push_back({{Ev("DELETED", "a", "21")}});
  h.Make();
  ASSERT_OK(h.watch->Run());
  EXPECT_THAT(h.rec.log, ElementsAre("list@10:2", "ADDED a@11", "MODIFIED a@12", "DELETED a@21"));
  // The bookmark advanced the version without an event; the 4th watch is the
  // script running out.
  EXPECT_THAT(h.client.watch_rvs, ElementsAre("10", "12", "20", "21"));
  EXPECT_EQ(h.client.list_calls, 1);
  EXPECT_TRUE(h.sleeps.empty() || h.sleeps.size() == 1);
}

TEST(Watch, RelistsOnGoneEventAndOnHttp410) {
  Harness h;
  h.client.lists.push_back(MakeList("10", 1));
  h.client.streams.push_back(
      {{Ev("ADDED", "a", "11"),
        R"json({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 11 (50)","reason":"Expired","code":410}})json"}});
  h.client.lists.push_back(MakeList("60", 3));
  h.client.streams.push_back({{}, absl::OutOfRangeError("HTTP 410")});
  h.client.lists.push_back(MakeList("70", 0));
  h.Make();
  ASSERT_OK(h.watch->Run());
  EXPECT_THAT(h.rec.log, ElementsAre("list@10:1", "ADDED a@11", "list@60:3", "list@70:0"));
  EXPECT_THAT(h.client.watch_rvs, ElementsAre("10", "60", "70"));
  // The first 410 re-listed at once; the second one in a row backed off.
  ASSERT_GE(h.sleeps.size(), 1u);
  EXPECT_EQ(h.sleeps[0], absl::Seconds(2));
}

// KEP-5504's order: positive decimal integers without leading zeros, any
// length; anything else cannot be ordered.
TEST(CompareResourceVersions, OrdersIntegersOfAnyLengthAndNothingElse) {
  EXPECT_EQ(CompareResourceVersions("9", "10"), -1);
  EXPECT_EQ(CompareResourceVersions("10", "9"), 1);
  EXPECT_EQ(CompareResourceVersions("123", "123"), 0);
  EXPECT_EQ(CompareResourceVersions("99999999999999999999999", "100000000000000000000000"), -1);
  for (const char* bad : {"", "0", "012", "12a", "-3", " 1", "a"}) {
    EXPECT_EQ(CompareResourceVersions(bad, "5"), std::nullopt) << bad;
    EXPECT_EQ(CompareResourceVersions("5", bad), std::nullopt) << bad;
  }
}

// As client-go's reflector: the first list from the watch cache ("0", not a
// quorum read of every Pod of the cluster), a re-list not older than what was
// seen, and a quorum list ("") only when the server refuses the version.
TEST(Watch, ListsFromTheCacheAndFallsBackToAQuorumListOnlyWhenRefused) {
  Harness h;
  h.client.lists.push_back(MakeList("10", 1));
  h.client.streams.push_back({{Ev("ADDED", "a", "11")}, absl::OutOfRangeError("HTTP 410")});
  // The re-list at 11: the server has compacted it (410), then a quorum list.
  h.client.lists.push_back(absl::OutOfRangeError("HTTP 410 Expired"));
  h.client.lists.push_back(MakeList("60", 2));
  h.client.streams.push_back({{Ev("MODIFIED", "a", "61"), "garbage{"}});
  // The re-list at 61: the cache is behind it after an etcd restore.
  h.client.lists.push_back(absl::UnavailableError(
      "list resourceslices: API server answered HTTP 504 Timeout: Too large resource version: 61, "
      "current: 40"));
  h.client.lists.push_back(MakeList("41", 2));
  h.client.streams.push_back({{}, absl::OutOfRangeError("HTTP 410")});
  h.client.lists.push_back(MakeList("42", 2));  // at 41: served
  h.Make();
  ASSERT_OK(h.watch->Run());
  EXPECT_THAT(h.client.list_rvs, ElementsAre("0", "11", "", "61", "", "41"));
  EXPECT_THAT(h.rec.log, ElementsAre("list@10:1", "ADDED a@11", "list@60:2", "MODIFIED a@61",
                                     "list@41:2", "list@42:2"));
}

TEST(Watch, BacksOffExponentiallyCappedWhileServerIsDown) {
  Harness h;
  for (int i = 0; i < 9; ++i)
    h.client.lists.push_back(absl::UnavailableError("connection refused"));
  h.client.lists.push_back(MakeList("5", 0));
  h.client.streams.push_back({{Ev("ADDED", "x", "6")}, absl::UnavailableError("reset")});
  h.client.streams.push_back({{}, absl::UnavailableError("refused")});
  h.Make();
  ASSERT_OK(h.watch->Run());
  ASSERT_GE(h.sleeps.size(), 11u);
  std::vector<absl::Duration> first(h.sleeps.begin(), h.sleeps.begin() + 11);
  using absl::Seconds;
  // random() = 1: the top of each [base/2, base] range. After the event the
  // backoff restarts at 1 s.
  EXPECT_THAT(first,
              ElementsAre(Seconds(1), Seconds(2), Seconds(4), Seconds(8), Seconds(16), Seconds(30),
                          Seconds(30), Seconds(30), Seconds(30), Seconds(1), Seconds(2)));
  // A broken connection resumes from the version it had, without a list.
  EXPECT_THAT(std::vector<std::string>(h.client.watch_rvs.begin(), h.client.watch_rvs.begin() + 3),
              ElementsAre("5", "6", "6"));
  EXPECT_EQ(h.client.list_calls, 10 + 0);
}

TEST(Watch, JitterStaysWithinHalfToFullBase) {
  Harness h;
  for (int i = 0; i < 8; ++i) h.client.lists.push_back(absl::UnavailableError("down"));
  WatchOptions o;
  h.Make(o);
  // Re-make with a low random to see the bottom of the range.
  WatchOptions o2;
  o2.collection_path = "/apis/resource.k8s.io/v1/resourceslices";
  o2.sleep = [&](absl::Duration d) {
    h.sleeps.push_back(d);
    return true;
  };
  o2.random = [] { return 0.0; };
  Watch w(&h.client, o2, &h.rec);
  h.client.stop_when_exhausted = &w;
  ASSERT_OK(w.Run());
  ASSERT_GE(h.sleeps.size(), 7u);
  EXPECT_EQ(h.sleeps[0], absl::Milliseconds(500));
  EXPECT_EQ(h.sleeps[6], absl::Seconds(15));
}

TEST(Watch, BadLineRelistsAfterBackoff) {
  Harness h;
  h.client.lists.push_back(MakeList("1", 0));
  h.client.streams.push_back({{Ev("ADDED", "a", "2"), "garbage{"}});
  h.client.lists.push_back(MakeList("3", 1));
  h.Make();
  ASSERT_OK(h.watch->Run());
  EXPECT_THAT(h.rec.log, ElementsAre("list@1:0", "ADDED a@2", "list@3:1"));
  ASSERT_FALSE(h.rec.errors.empty());
  EXPECT_EQ(h.rec.errors[0], absl::StatusCode::kInvalidArgument);
}

TEST(Watch, StopFromAnotherThreadIsPrompt) {
  ScriptedClient client;
  Recorder rec;
  client.lists.push_back(MakeList("1", 0));
  client.streams.push_back(
      {{Ev("ADDED", "a", "2")}, absl::OkStatus(), /*block_until_cancelled=*/true});
  WatchOptions o;
  o.collection_path = "/apis/resource.k8s.io/v1/resourceslices";
  Watch w(&client, o, &rec);
  std::thread t([&] { EXPECT_OK(w.Run()); });
  while (w.streams() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  w.Stop();
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(w.resource_version(), "2");
}

TEST(Watch, StopDuringBackoffSleepIsPrompt) {
  ScriptedClient client;
  Recorder rec;
  for (int i = 0; i < 3; ++i) client.lists.push_back(absl::UnavailableError("down"));
  WatchOptions o;
  o.collection_path = "/apis/resource.k8s.io/v1/resourceslices";
  o.initial_backoff = absl::Seconds(60);
  o.max_backoff = absl::Seconds(60);
  Watch w(&client, o, &rec);
  std::thread t([&] { EXPECT_OK(w.Run()); });
  while (w.failures() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  w.Stop();
  t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

}  // namespace
}  // namespace fabric::kubeapi
