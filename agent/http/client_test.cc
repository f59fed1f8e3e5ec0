// The HTTP client against scripted servers (plain sockets in a thread, so a
// test says byte for byte what the server sends): kept-alive connections,
// chunked and streamed bodies, deadlines, a cancel from another thread while
// the server is silent, bounds. TLS verification against the server core.
#include "agent/http/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent/http/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// Reads one request head (and a body of its Content-Length); "" at EOF.
std::string ReadRequest(int fd) {
  std::string in;
  char c;
  while (in.find("\r\n\r\n") == std::string::npos) {
    if (::read(fd, &c, 1) != 1) return "";
    in.push_back(c);
  }
  const size_t cl = in.find("Content-Length: ");
  if (cl != std::string::npos) {
    size_t n = std::stoul(in.substr(cl + 16));
    while (n-- > 0 && ::read(fd, &c, 1) == 1) in.push_back(c);
  }
  return in;
}

void Send(int fd, const std::string& s) { (void)!::send(fd, s.data(), s.size(), MSG_NOSIGNAL); }

// A server on 127.0.0.1 that runs `script` for each connection, one at a
// time, on its own thread.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(int fd)> script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 16);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++connections_;
        script_(c);
        ::close(c);
      }
    });
  }
  ~ScriptedServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_.load(); }

 private:
  std::function<void(int)> script_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::unique_ptr<HttpClient> Client(const std::string& url) {
  HttpClientOptions o;
  o.base_url = url;
  auto c = HttpClient::Create(o);
  EXPECT_OK(c);
  return c.ok() ? *std::move(c) : nullptr;
}

HttpClientRequest Req(const std::string& method, const std::string& target,
                      absl::Duration timeout = absl::Seconds(5)) {
  HttpClientRequest r;
  r.method = method;
  r.target = target;
  r.timeout = timeout;
  return r;
}

TEST(HttpClientTest, KeepsTheConnectionAliveAndSendsTheBody) {
  std::vector<std::string> seen;
  ScriptedServer server([&](int fd) {
    for (std::string req; !(req = ReadRequest(fd)).empty();) {
      seen.push_back(req);
      Send(fd, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
    }
  });
  auto client = Client(server.url());
  const std::string body = "{\"a\":1}";
  HttpClientRequest post = Req("POST", "/x?y=%20");
  post.body = &body;
  post.headers = {{"Content-Type", "application/json"}};
  for (int i = 0; i < 3; ++i) {
    auto r = client->Send(post);
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 201);
    EXPECT_EQ(r->body, "ok");
  }
  EXPECT_EQ(server.connections(), 1);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_THAT(seen[0], ::testing::StartsWith("POST /x?y=%20 HTTP/1.1\r\nHost: 127.0.0.1:"));
  EXPECT_THAT(seen[0], HasSubstr("\r\nContent-Length: 7\r\nContent-Type: application/json\r\n"));
  EXPECT_THAT(seen[0], ::testing::EndsWith("\r\n\r\n{\"a\":1}"));
}

TEST(HttpClientTest, AnIdleConnectionTheServerClosedIsNotUsed) {
  ScriptedServer server([](int fd) {
    ReadRequest(fd);
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1");
    // and closes (keep-alive notwithstanding), as an API server's idle timeout does
  });
  auto client = Client(server.url());
  ASSERT_OK(client->Send(Req("POST", "/")));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto again = client->Send(Req("POST", "/"));  // not idempotent: must not need a retry
  ASSERT_OK(again);
  EXPECT_EQ(again->body, "1");
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpClientTest, ChunkedAndCloseFramedBodies) {
  ScriptedServer server([](int fd) {
    const std::string req = ReadRequest(fd);
    if (req.find("GET /chunked") == 0) {
      Send(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab");
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      Send(fd, "cd\r\n3;x=y\r\nefg\r\n0\r\n\r\n");
    } else {
      Send(fd, "HTTP/1.0 404 Not Found\r\n\r\nuntil the end");
    }
  });
  auto client = Client(server.url());
  auto c = client->Send(Req("GET", "/chunked"));
  ASSERT_OK(c);
  EXPECT_EQ(c->body, "abcdefg");
  auto e = client->Send(Req("GET", "/eof"));
  ASSERT_OK(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->body, "until the end");
}

TEST(HttpClientTest, StreamsA200AndIsCancelledWhileTheServerIsSilent) {
  std::atomic<bool> release{false};
  ScriptedServer server([&](int fd) {
    ReadRequest(fd);
    Send(fd,
         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n6\r\nline2\n\r\n");
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // silent
  });
  auto client = Client(server.url());
  Canceller cancel;
  std::string streamed;
  std::atomic<bool> both{false};
  HttpClientRequest r = Req("GET", "/watch", absl::Minutes(5));
  r.cancel = &cancel;
  r.on_body = [&](absl::string_view data) {
    streamed.append(data.data(), data.size());
    if (streamed == "line1\nline2\n") both = true;
    return true;
  };
  // Cancels 200 ms after both lines came, while the server says nothing.
  std::thread canceller([&] {
    for (int i = 0; i < 500 && !both; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel.Cancel();
  });
  const auto t0 = Clock::now();
  auto result = client->Send(r);
  const auto took = Clock::now() - t0;
  canceller.join();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_EQ(streamed, "line1\nline2\n");
  release = true;
}

TEST(HttpClientTest, OnBodyCanStopAndErrorsAreBuffered) {
  ScriptedServer server([](int fd) {
    const std::string req = ReadRequest(fd);
    if (req.find("GET /gone") == 0) {
      Send(fd, "HTTP/1.1 410 Gone\r\nContent-Length: 7\r\n\r\nexpired");
    } else {
      Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nfirst part");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  auto client = Client(server.url());
  HttpClientRequest r = Req("GET", "/stream");
  int calls = 0;
  r.on_body = [&](absl::string_view) { return ++calls < 1; };
  auto stopped = client->Send(r);
  ASSERT_OK(stopped);
  EXPECT_TRUE(stopped->stopped);
  r.target = "/gone";
  auto gone = client->Send(r);
  ASSERT_OK(gone);
  EXPECT_EQ(gone->status, 410);
  EXPECT_EQ(gone->body, "expired");  // not a 200: kept, not streamed
}

TEST(HttpClientTest, DeadlinesBoundsAndBrokenAnswers) {
  ScriptedServer server([](int fd) {
    const std::string req = ReadRequest(fd);
    if (req.find("GET /silent") == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    } else if (req.find("GET /big") == 0) {
      Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + std::string(2000, 'x'));
    } else if (req.find("GET /short") == 0) {
      Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
    } else {
      Send(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    }
  });
  auto client = Client(server.url());
  const auto t0 = Clock::now();
  auto silent = client->Send(Req("GET", "/silent", absl::Milliseconds(300)));
  EXPECT_THAT(silent, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1200));
  HttpClientRequest big = Req("GET", "/big");
  big.max_body_bytes = 1000;
  EXPECT_THAT(client->Send(big), StatusIs(absl::StatusCode::kResourceExhausted));
  auto cut = client->Send(Req("GET", "/short"));
  EXPECT_THAT(cut, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(cut.status().message(), HasSubstr("ended early"));
  EXPECT_THAT(client->Send(Req("GET", "/ssh")), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(HttpClientTest, NobodyListening) {
  int port;
  {
    ScriptedServer gone([](int) {});
    port = std::stoi(gone.url().substr(17));
  }
  auto client = Client("http://127.0.0.1:" + std::to_string(port));
  auto r = client->Send(Req("GET", "/"));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(r.status().message(), HasSubstr("cannot connect to 127.0.0.1:"));
}

TEST(HttpClientTest, BadBaseUrls) {
  for (const char* url :
       {"127.0.0.1:80", "ftp://x", "https://", "http://h:0", "http://h:x", "http://user@h:1"}) {
    HttpClientOptions o;
    o.base_url = url;
    EXPECT_THAT(HttpClient::Create(o), StatusIs(absl::StatusCode::kInvalidArgument)) << url;
  }
  HttpClientOptions o;
  o.base_url = "https://[::1]:6443/";
  auto c = HttpClient::Create(o);
  ASSERT_OK(c);
  EXPECT_EQ((*c)->authority(), "[::1]:6443");
}

TEST(HttpClientTlsTest, VerifiesTheCertificateAndItsName) {
  signal(SIGPIPE, SIG_IGN);
  if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "openssl is missing";
  testing::TempDir dir("ctls");
  ASSERT_TRUE(testing::MakeCertificate(dir.path(), "server"));
  ASSERT_TRUE(testing::MakeCertificate(dir.path(), "other"));
  ServerCertificate cert(dir.path() + "/server.crt", dir.path() + "/server.key", absl::Seconds(30));
  ASSERT_OK(cert.Load());
  HttpServerCoreOptions so;
  so.tls_context = [&] { return cert.Current(); };
  HttpServerCore* core_ptr = nullptr;
  HttpServerCore core(so, [&](uint64_t id, const HttpRequest& r) {
    core_ptr->Respond(id, HttpAnswer{200, "text/plain", r.bearer_token});
  });
  core_ptr = &core;
  ASSERT_OK(core.Start("127.0.0.1:0"));
  const std::string url = "https://127.0.0.1:" + std::to_string(core.port());
  auto send = [&](HttpClientOptions o) -> absl::StatusOr<HttpClientResponse> {
    o.base_url = url;
    auto c = HttpClient::Create(o);
    if (!c.ok()) return c.status();
    HttpClientRequest r = Req("GET", "/");
    r.headers = {{"Authorization", "Bearer s3cret"}};
    return (*c)->Send(r);
  };
  HttpClientOptions o;
  o.ca_file = dir.path() + "/server.crt";
  auto ok = send(o);
  ASSERT_OK(ok);
  EXPECT_EQ(ok->body, "s3cret");
  o.server_name = "localhost";  // in the certificate
  EXPECT_OK(send(o));
  o.server_name = "elsewhere.example";
  EXPECT_THAT(send(o), StatusIs(absl::StatusCode::kFailedPrecondition));
  o.server_name = "";
  o.ca_file = dir.path() + "/other.crt";
  auto wrong = send(o);
  EXPECT_THAT(wrong, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(wrong.status().message(), HasSubstr("does not verify as '127.0.0.1'"));
  EXPECT_THAT(wrong.status().message(), HasSubstr("other.crt"));
  EXPECT_THAT(wrong.status().message(), ::testing::Not(HasSubstr("s3cret")));
  o.ca_file = dir.path() + "/missing.crt";
  EXPECT_THAT(send(o), StatusIs(absl::StatusCode::kFailedPrecondition));
  o.ca_file = "";
  o.insecure = true;
  EXPECT_OK(send(o));
}

}  // namespace
}  // namespace fabric
