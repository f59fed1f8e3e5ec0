#include "agent/metrics/http_server.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

int Connect(int port, int rcv_timeout_ms = 3000, const char* host = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{rcv_timeout_ms / 1000, (rcv_timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host, &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Reply {
  int status = 0;  // 0: no (complete) answer within the timeout
  std::string head, body;
};

// One request the way a kubelet probe sends it, answered within `timeout_ms`.
Reply Get(int port, const std::string& path, int timeout_ms = 3000,
          const std::string& method = "GET", const char* host = "127.0.0.1") {
  Reply r;
  int fd = Connect(port, timeout_ms, host);
  if (fd < 0) return r;
  const std::string req = method + " " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.30\r\n"
                          "Connection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return r;
  }
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  const bool timed_out = n < 0;
  ::close(fd);
  if (timed_out || resp.rfind("HTTP/1.", 0) != 0) return r;
  r.status = std::atoi(resp.c_str() + 9);
  const size_t end = resp.find("\r\n\r\n");
  r.head = resp.substr(0, end);
  if (end != std::string::npos) r.body = resp.substr(end + 4);
  return r;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions opts = {}, absl::Duration cache = absl::Seconds(1),
                   const std::string& address = "127.0.0.1:0") {
    HttpHandlers h;
    h.metrics = [this] {
      renders_++;
      std::this_thread::sleep_for(render_delay_);
      return metrics_body_;
    };
    h.not_ready_reason = [this] {
      if (throw_) throw std::runtime_error("readyz \xff");
      return not_ready_;
    };
    h.node_json = [this] {
      node_renders_++;
      if (throw_) throw std::runtime_error("bad bytes \xff\xfe");
      std::unique_lock<std::mutex> lock(mu_);
      blocked_cv_.notify_all();
      node_entered_ = true;
      release_cv_.wait(lock, [this] { return !block_node_; });
      return std::string("{\"devices\":[]}\n");
    };
    h.peers_json = [this]() -> std::string {
      if (throw_) throw 42;  // not even a std::exception
      return "{\"pairs\":[]}\n";
    };
    if (with_pods_) {
      h.pods = [this](const std::string& path, const std::string& query) -> HttpAnswer {
        std::unique_lock<std::mutex> lock(mu_);
        pod_calls_.push_back(path + "|" + query);
        pods_entered_ = true;
        blocked_cv_.notify_all();
        release_cv_.wait(lock, [this] { return !block_pods_; });
        if (throw_) throw std::runtime_error("pods \xff");
        if (path == "/v1/pods/ml/gone")
          return HttpAnswer{404, "application/json", "{\"error\":\"no Pod\"}\n"};
        if (query == "window=1s")
          return HttpAnswer{400, "application/json", "{\"error\":\"window\"}\n"};
        return HttpAnswer{200, "application/json", "{\"path\":\"" + path + "\"}\n"};
      };
    }
    server_ = std::make_unique<HttpServer>(h, cache, opts);
    ASSERT_OK(server_->Start(address));
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::string metrics_body_ = "fabric_build_info{version=\"t\"} 1\n";
  std::string not_ready_;
  std::chrono::milliseconds render_delay_{0};
  std::atomic<int> renders_{0};
  std::atomic<int> node_renders_{0};
  std::atomic<bool> throw_{false};
  // /v1/node blocks while block_node_ (a render that takes forever).
  std::mutex mu_;
  std::condition_variable release_cv_, blocked_cv_;
  bool block_node_ = false;
  bool node_entered_ = false;
  // /v1/pods: every call's "path|query"; blocks while block_pods_.
  bool with_pods_ = true;
  bool block_pods_ = false;
  bool pods_entered_ = false;
  std::vector<std::string> pod_calls_;

  // The server goes first: its worker may still be rendering from the
  // members below (destroyed before server_ otherwise).
  void TearDown() override {
    ReleaseNode();
    if (server_) server_->Stop();
  }

  void ReleaseNode() {
    std::lock_guard<std::mutex> lock(mu_);
    block_node_ = false;
    block_pods_ = false;
    release_cv_.notify_all();
  }
};

TEST_F(HttpServerTest, ServesTheFourEndpoints) {
  StartServer();
  Reply h = Get(port_, "/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "ok\n");
  EXPECT_THAT(h.head, HasSubstr("Content-Length: 3"));
  Reply m = Get(port_, "/metrics?x=1");
  EXPECT_EQ(m.status, 200);
  // The agent's text, then the server's own counter.
  EXPECT_THAT(m.body, StartsWith(metrics_body_));
  EXPECT_THAT(m.body, EndsWith("\nfabric_http_handler_errors_total 0\n"));
  EXPECT_THAT(m.head, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_EQ(Get(port_, "/readyz").status, 200);
  not_ready_ = "vpc.amazonaws.com/efa not registered";
  Reply r = Get(port_, "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, not_ready_ + "\n");
  Reply n = Get(port_, "/v1/node");
  EXPECT_EQ(n.status, 200);
  EXPECT_THAT(n.head, HasSubstr("application/json"));
  EXPECT_EQ(Get(port_, "/nope").status, 404);
  EXPECT_EQ(Get(port_, "/metrics", 3000, "POST").status, 405);
  Reply head = Get(port_, "/metrics", 3000, "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
}

// Issue 11 item 9: four slow clients (connected, request half sent, never
// finished) used to hold all four server threads for the 5 s read timeout,
// so a liveness probe with a 1 s timeout failed and the kubelet restarted
// the agent. Four more ask for a big /metrics and never read it.
TEST_F(HttpServerTest, SlowClientsDoNotStarveHealthz) {
  metrics_body_ = std::string(8 << 20, 'x');  // more than the socket buffers hold
  StartServer();
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "GET /metrics HTTP/1.1\r\nHost:", 28), 28);
    slow.push_back(fd);
  }
  for (int i = 0; i < 4; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    Reply h = Get(port_, "/healthz", /*timeout_ms=*/1000);  // the chart's probe timeout
    EXPECT_EQ(h.status, 200) << "probe " << i << " not answered within 1 s";
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1000));
  }
  EXPECT_EQ(Get(port_, "/readyz", 1000).status, 200);
  for (int fd : slow) ::close(fd);
}

// More idle connections than the cap: the probe still gets in (the oldest
// connection that never sent a request is dropped for it).
TEST_F(HttpServerTest, IdleConnectionsBeyondTheCapDoNotLockOutProbes) {
  HttpServerOptions opts;
  opts.max_connections = 8;
  StartServer(opts);
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    int fd = Connect(port_);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Reply h = Get(port_, "/healthz", 1000);
  EXPECT_EQ(h.status, 200);
  // The dropped ones were closed by the server: reading them yields EOF.
  int closed = 0;
  for (int fd : idle) {
    char c;
    timeval tv{0, 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::read(fd, &c, 1) == 0) ++closed;
    ::close(fd);
  }
  EXPECT_GE(closed, 40 - 8);
}

// A request head that trickles in is cut off after read_timeout.
TEST_F(HttpServerTest, RequestHeadMustArriveWithinTheReadTimeout) {
  HttpServerOptions opts;
  opts.read_timeout = absl::Milliseconds(300);
  StartServer(opts);
  int fd = Connect(port_, 3000);
  ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  ASSERT_EQ(::write(fd, "GET /hea", 8), 8);
  char c;
  EXPECT_EQ(::read(fd, &c, 1), 0);  // closed by the server
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));
  ::close(fd);
}

// A slow render runs off the loop: probes answer while it runs, and scrapers
// that arrive during it share it instead of each paying for one.
TEST_F(HttpServerTest, SlowRenderNeitherBlocksProbesNorRunsPerScraper) {
  render_delay_ = std::chrono::milliseconds(500);
  StartServer({}, absl::ZeroDuration());  // no cache: only the sharing helps
  std::vector<std::thread> scrapers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    scrapers.emplace_back([&] { ok += Get(port_, "/metrics", 5000).status == 200; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  EXPECT_EQ(Get(port_, "/healthz", 1000).status, 200);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(400));
  for (auto& t : scrapers) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_LE(renders_.load(), 2);  // the first alone, then every one queued behind it
}

// The cached body lives as long as the cache is good (1 s), not until the
// next scrape 15-60 s later: 0.25 MiB at 32 devices, 1 MiB at 128.
TEST_F(HttpServerTest, StaleMetricsBodyIsDroppedNotKeptUntilTheNextScrape) {
  metrics_body_ = std::string(300 * 1024, '#') + "\n";
  StartServer({}, absl::Seconds(1));
  const size_t size = Get(port_, "/metrics").body.size();
  ASSERT_GT(size, metrics_body_.size());
  EXPECT_EQ(Get(port_, "/metrics").body.size(), size);  // from the cache
  EXPECT_EQ(renders_.load(), 1);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (server_->cached_metrics_bytes() != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(server_->cached_metrics_bytes(), 0u);
  EXPECT_EQ(Get(port_, "/metrics").body.size(), size);
  EXPECT_EQ(renders_.load(), 2);
}

// Issue 19: a handler that throws (nlohmann's type_error.316 on a peer's
// bytes) ended the process: the worker had no catch. Now: 500, counted, and
// the server serves on.
TEST_F(HttpServerTest, AHandlerThatThrowsIsAnswered500AndTheServerServesOn) {
  StartServer({}, absl::ZeroDuration());
  throw_ = true;
  Reply n = Get(port_, "/v1/node");
  EXPECT_EQ(n.status, 500);
  EXPECT_EQ(n.body, "internal error\n");  // never the exception's bytes
  EXPECT_EQ(Get(port_, "/v1/peers").status, 500);
  EXPECT_EQ(Get(port_, "/readyz").status, 500);
  EXPECT_EQ(server_->handler_errors(), 3u);
  EXPECT_EQ(Get(port_, "/healthz").status, 200);
  throw_ = false;
  Reply m = Get(port_, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_THAT(m.body, HasSubstr("\nfabric_http_handler_errors_total 3\n"));
  EXPECT_THAT(m.body, HasSubstr("# TYPE fabric_http_handler_errors_total counter\n"));
  EXPECT_EQ(Get(port_, "/v1/node").status, 200);  // a failed render is not cached
}

// Issue 19 item 5: /v1/node was neither cached nor limited: 64 connections
// asking for it kept the one worker's queue full, and the kubelet's
// readiness probe, queued behind them, got 503. Now /readyz is answered on
// the loop, and the 64 requests share one render.
TEST_F(HttpServerTest, ReadyzIsAnsweredWhileGreedyClientsHoldEveryConnection) {
  block_node_ = true;
  HttpServerOptions opts;  // 64 connections
  StartServer(opts);
  std::vector<int> greedy;
  const std::string req = "GET /v1/node HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < opts.max_connections; ++i) {
    int fd = Connect(port_, 10000);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    greedy.push_back(fd);
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    blocked_cv_.wait(lock, [this] { return node_entered_; });  // the render is stuck
  }
  Reply r = Get(port_, "/readyz", 10000);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "ready\n");
  not_ready_ = "vpc.amazonaws.com/efa not registered";
  EXPECT_EQ(Get(port_, "/readyz", 10000).status, 503);
  EXPECT_EQ(Get(port_, "/healthz", 10000).status, 200);
  ReleaseNode();
  int answered = 0;
  for (int fd : greedy) {
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
    answered += resp.rfind("HTTP/1.1 200", 0) == 0;
    ::close(fd);
  }
  // The probes took the oldest connections' places; every other one got the
  // same, single render.
  EXPECT_GE(answered, opts.max_connections - 3);
  EXPECT_EQ(node_renders_.load(), 1);
}

// /v1/node and /v1/peers are cached like /metrics (the same TTL).
TEST_F(HttpServerTest, JsonViewsAreCachedLikeMetrics) {
  StartServer({}, absl::Seconds(60));
  EXPECT_EQ(Get(port_, "/v1/node").status, 200);
  EXPECT_EQ(Get(port_, "/v1/node").status, 200);
  EXPECT_EQ(Get(port_, "/v1/peers").status, 200);
  EXPECT_EQ(Get(port_, "/v1/peers").status, 200);
  EXPECT_EQ(node_renders_.load(), 1);
  EXPECT_EQ(server_->renders(), 2u);
}

// /v1/pods (issue 17): the handler gets the path and the query and its
// status, type and body go out as they are; nothing is cached.
TEST_F(HttpServerTest, PodsRouteHandsPathAndQueryToItsHandler) {
  StartServer({}, absl::Seconds(60));
  Reply one = Get(port_, "/v1/pods/ml/member-0?window=60s");
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(one.body, "{\"path\":\"/v1/pods/ml/member-0\"}\n");
  EXPECT_THAT(one.head, HasSubstr("Content-Type: application/json"));
  EXPECT_EQ(Get(port_, "/v1/pods").status, 200);
  EXPECT_EQ(Get(port_, "/v1/pods").status, 200);  // not cached: asked again
  Reply gone = Get(port_, "/v1/pods/ml/gone");
  EXPECT_EQ(gone.status, 404);
  EXPECT_THAT(gone.head, HasSubstr("Content-Type: application/json"));
  EXPECT_EQ(gone.body, "{\"error\":\"no Pod\"}\n");
  EXPECT_EQ(Get(port_, "/v1/pods?window=1s").status, 400);
  EXPECT_EQ(Get(port_, "/v1/podsx").status, 404);  // not the route: the server's 404
  Reply head = Get(port_, "/v1/pods", 3000, "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_THAT(pod_calls_,
              ::testing::ElementsAre("/v1/pods/ml/member-0|window=60s", "/v1/pods|", "/v1/pods|",
                                     "/v1/pods/ml/gone|", "/v1/pods|window=1s", "/v1/pods|"));
}

// An IPv4 address of this host that is not loopback ("" when there is none).
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* i = list; i != nullptr && out.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    out = ::inet_ntop(AF_INET, &a, text, sizeof(text));
  }
  ::freeifaddrs(list);
  return out;
}

TEST_F(HttpServerTest, PodsAreServedToLoopbackClientsOnly) {
  const std::string ip = NonLoopbackAddress();
  if (ip.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  StartServer({}, absl::Seconds(1), "0.0.0.0:0");
  Reply remote = Get(port_, "/v1/pods/ml/member-0", 3000, "GET", ip.c_str());
  EXPECT_EQ(remote.status, 403);
  EXPECT_THAT(remote.head, HasSubstr("Content-Type: application/json"));
  EXPECT_THAT(remote.body, HasSubstr("loopback clients only"));
  EXPECT_EQ(Get(port_, "/metrics", 3000, "GET", ip.c_str()).status, 200);  // unchanged
  EXPECT_EQ(Get(port_, "/healthz", 3000, "GET", ip.c_str()).status, 200);
  EXPECT_EQ(Get(port_, "/v1/pods/ml/member-0").status, 200);  // loopback
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_THAT(pod_calls_, ::testing::ElementsAre("/v1/pods/ml/member-0|"));
}

TEST_F(HttpServerTest, PodsRequestsAskedMeanwhileShareOneCall) {
  block_pods_ = true;
  StartServer();
  std::vector<std::thread> clients;
  std::vector<int> statuses(4, 0);
  clients.emplace_back([&] { statuses[0] = Get(port_, "/v1/pods?window=2m").status; });
  {
    std::unique_lock<std::mutex> lock(mu_);
    blocked_cv_.wait(lock, [this] { return pods_entered_; });
  }
  for (int i = 1; i < 3; ++i) {
    clients.emplace_back([&, i] { statuses[i] = Get(port_, "/v1/pods?window=2m").status; });
  }
  // Another query is its own call, after the first.
  clients.emplace_back([&] { statuses[3] = Get(port_, "/v1/pods?window=3m").status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ReleaseNode();
  for (auto& t : clients) t.join();
  EXPECT_THAT(statuses, ::testing::Each(200));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_THAT(pod_calls_,
              ::testing::UnorderedElementsAre("/v1/pods|window=2m", "/v1/pods|window=3m"));
}

TEST_F(HttpServerTest, PodsHandlerThatThrowsIs500AndCounted) {
  StartServer();
  throw_ = true;
  Reply r = Get(port_, "/v1/pods/ml/member-0");
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.body, "internal error\n");
  EXPECT_EQ(server_->handler_errors(), 1u);
  throw_ = false;
  EXPECT_EQ(Get(port_, "/v1/pods/ml/member-0").status, 200);
}

TEST_F(HttpServerTest, NoPodsHandlerNoRoute) {
  with_pods_ = false;
  StartServer();
  EXPECT_EQ(Get(port_, "/v1/pods").status, 404);
}

TEST_F(HttpServerTest, BadAddressesAreRefused) {
  HttpServer s(HttpHandlers{}, absl::Seconds(1));
  EXPECT_THAT(s.Start("nonsense"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(s.Start("127.0.0.1:99999"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fabric
