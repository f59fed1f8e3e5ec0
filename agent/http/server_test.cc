// The server core on its own: answers from another thread, the answer
// deadline, the TLS handshake deadline, the bound per client address, and
// late answers after Stop(). The plain port's routes: agent/metrics
// http_server_test; the TLS port under misbehaving clients:
// agent/podsapi/tls_port_test.
#include "agent/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/http/client.h"
#include "agent/http/openssl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// A plain connection from `source` (a loopback address) to the core.
int ConnectFrom(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The server closed it (EOF), as opposed to nothing to read yet.
bool ClosedByServer(int fd) {
  char c;
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return ::read(fd, &c, 1) == 0;
}

absl::StatusOr<HttpClientResponse> Get(const std::string& base, const std::string& target,
                                       const std::string& method = "GET",
                                       HttpClientOptions o = {}) {
  o.base_url = base;
  auto client = HttpClient::Create(o);
  if (!client.ok()) return client.status();
  HttpClientRequest r;
  r.method = method;
  r.target = target;
  r.timeout = absl::Seconds(10);
  return (*client)->Send(r);
}

TEST(HttpServerCoreTest, AnswersFromAnotherThreadAndHeadHasNoBody) {
  std::mutex mu;
  std::vector<std::thread> answerers;
  HttpServerCore* core_ptr = nullptr;
  HttpServerCore core({}, [&](uint64_t id, const HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    answerers.emplace_back([&core_ptr, id, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      core_ptr->Respond(id, HttpAnswer{200, "text/plain", r.path + "?" + r.query + "\n"});
    });
  });
  core_ptr = &core;
  ASSERT_OK(core.Start("127.0.0.1:0"));
  // The log line names this, and scripts read the port from it.
  EXPECT_EQ(core.bound_address(), absl::StrCat("127.0.0.1:", core.port()));
  EXPECT_GT(core.port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(core.port());
  auto r = Get(base, "/a/b?c=d");
  ASSERT_OK(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "/a/b?c=d\n");
  auto head = Get(base, "/a", "HEAD");
  ASSERT_OK(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  auto post = Get(base, "/a", "POST");
  ASSERT_OK(post);
  EXPECT_EQ(post->status, 405);
  core.Stop();
  std::lock_guard<std::mutex> lock(mu);
  for (std::thread& t : answerers) t.join();
}

TEST(HttpServerCoreTest, ARequestNobodyAnswersIsClosedAtTheAnswerDeadline) {
  HttpServerCoreOptions o;
  o.answer_timeout = absl::Milliseconds(300);
  HttpServerCore core(o, [](uint64_t, const HttpRequest&) {});
  ASSERT_OK(core.Start("127.0.0.1:0"));
  const auto t0 = Clock::now();
  auto r = Get("http://127.0.0.1:" + std::to_string(core.port()), "/never");
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(core.counters().timed_out, 1u);
}

TEST(HttpServerCoreTest, AnswersAfterStopAreIgnored) {
  std::atomic<uint64_t> last{0};
  HttpServerCore core({}, [&](uint64_t id, const HttpRequest&) { last = id; });
  ASSERT_OK(core.Start("127.0.0.1:0"));
  const int fd = ConnectFrom("127.0.0.1", core.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "GET / HTTP/1.1\r\n\r\n", 18), 18);
  for (int i = 0; i < 100 && last == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(last.load(), 0u);
  core.Stop();
  core.Respond(last, HttpAnswer{200, "text/plain", "late\n"});  // no crash, no write
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
}

// One address opening connection after connection makes room among its own
// connections, not among another client's.
TEST(HttpServerCoreTest, ABoundPerClientAddressKeepsOthersConnected) {
  HttpServerCoreOptions o;
  o.max_connections = 8;
  o.max_connections_per_peer = 4;
  o.read_timeout = absl::Seconds(30);
  HttpServerCore core(o, [&](uint64_t, const HttpRequest&) {});
  ASSERT_OK(core.Start("127.0.0.1:0"));
  std::vector<int> b, a;
  for (int i = 0; i < 4; ++i) b.push_back(ConnectFrom("127.0.0.2", core.port()));
  if (b[0] < 0) GTEST_SKIP() << "cannot bind 127.0.0.2";
  for (int i = 0; i < 10; ++i) {
    a.push_back(ConnectFrom("127.0.0.1", core.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int b_closed = 0, a_closed = 0;
  for (int fd : b) b_closed += ClosedByServer(fd);
  for (int fd : a) a_closed += ClosedByServer(fd);
  EXPECT_EQ(b_closed, 0) << "the other client's idle connections were dropped";
  EXPECT_EQ(a_closed, 6);  // its oldest made room for its newest
  EXPECT_GE(core.counters().evicted, 6u);
  for (int fd : a) ::close(fd);
  for (int fd : b) ::close(fd);
}

class HttpServerCoreTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "openssl is missing";
    ASSERT_TRUE(testing::MakeCertificate(dir_.path(), "agent"));
    certificate_ = std::make_unique<ServerCertificate>(
        dir_.path() + "/agent.crt", dir_.path() + "/agent.key", absl::Seconds(30));
    ASSERT_OK(certificate_->Load());
  }
  HttpServerCoreOptions Tls() {
    HttpServerCoreOptions o;
    o.tls_context = [this] { return certificate_->Current(); };
    o.json_errors = true;
    return o;
  }
  testing::TempDir dir_{"core"};
  std::unique_ptr<ServerCertificate> certificate_;
};

TEST_F(HttpServerCoreTlsTest, ServesOverTlsAndDropsASilentHandshake) {
  HttpServerCoreOptions o = Tls();
  o.handshake_timeout = absl::Milliseconds(300);
  HttpServerCore* core_ptr = nullptr;
  HttpServerCore core(o, [&](uint64_t id, const HttpRequest& r) {
    core_ptr->Respond(
        id, HttpAnswer{200, "application/json", "{\"token\":\"" + r.bearer_token + "\"}"});
  });
  core_ptr = &core;
  ASSERT_OK(core.Start("127.0.0.1:0"));
  HttpClientOptions c;
  c.ca_file = dir_.path() + "/agent.crt";
  auto r = Get("https://127.0.0.1:" + std::to_string(core.port()), "/x", "GET", c);
  ASSERT_OK(r);
  EXPECT_EQ(r->body, "{\"token\":\"\"}");
  auto bad = Get("https://127.0.0.1:" + std::to_string(core.port()), "/x", "PUT", c);
  ASSERT_OK(bad);
  EXPECT_EQ(bad->status, 405);
  EXPECT_EQ(bad->body, "{\"error\":\"only GET and HEAD\"}\n");

  const int silent = ConnectFrom("127.0.0.1", core.port());
  const auto t0 = Clock::now();
  char ch;
  EXPECT_EQ(::read(silent, &ch, 1), 0);  // cut at the handshake deadline
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  ::close(silent);
  EXPECT_GE(core.counters().tls_failures, 1u);
}

}  // namespace
}  // namespace fabric
