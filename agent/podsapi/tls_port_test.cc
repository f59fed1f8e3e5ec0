// The TLS /v1/pods port under clients that do not behave (issue 32 items 1
// and 2), with the real OpenSSL on both sides; the handler answers at once,
// so any delay is the server's.
//  - the acceptance test: 8 clients that trickle a real ClientHello one byte
//    every 2 s (and reconnect when cut) must not keep normal requests from
//    being answered within 3 s, and Stop() must return within 5 s while they
//    trickle on;
//  - Stop() does not wait for clients that never send a byte;
//  - accept4 out of descriptors does not spin the acceptor;
//  - HEAD gets the head and no body.
// Bounds: a normal request takes milliseconds here, a stalled port minutes;
// the bounds leave room for a busy 2-core machine.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "agent/http/get.h"
#include "agent/podsapi/tls_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/test_dirs.h"

namespace fabric::podsapi {
namespace {

using Clock = std::chrono::steady_clock;

// The bytes a real TLS client sends first: OpenSSL's ClientHello, taken
// from a memory BIO.
std::string ClientHello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);  // the SSL owns both now
  SSL_set_tlsext_host_name(ssl, "localhost");
  SSL_connect(ssl);  // wants to read the ServerHello: the ClientHello is in `out`
  char* data = nullptr;
  const long n = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(n > 0 ? n : 0));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return hello;
}

int ConnectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// `request` over TLS (no certificate check), and every byte of the answer
// until the server closes.
std::string RawTls(int port, const std::string& request) {
  std::string out;
  const int fd = ConnectTo(port);
  if (fd < 0) return out;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) == 1 &&
      SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
    char buf[4096];
    int n;
    while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  ::close(fd);
  return out;
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int OpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return n - 3;  // ".", ".." and the directory's own
}

class TlsPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as the agent does
    if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "openssl is missing";
    ASSERT_TRUE(testing::MakeCertificate(dir_.path(), "agent"));
  }
  std::unique_ptr<TlsServer> Start(TlsServerOptions to = {}) {
    to.address = "127.0.0.1:0";
    to.cert_file = dir_.path() + "/agent.crt";
    to.key_file = dir_.path() + "/agent.key";
    auto server = std::make_unique<TlsServer>(to, [](const TlsRequest& r) {
      return HttpAnswer{200, "application/json", "{\"path\":\"" + r.path + "\"}\n"};
    });
    EXPECT_TRUE(server->Start().ok());
    return server;
  }
  testing::TempDir dir_{"tlsport"};
};

// One slow client: connects, sends `hello` one byte per `gap`, reconnects
// whenever the server cuts it, until `stop`.
void Trickle(int port, const std::string& hello, std::chrono::milliseconds gap,
             const std::atomic<bool>& stop, std::atomic<int>& connects) {
  while (!stop) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ++connects;
    for (size_t i = 0; i < hello.size() && !stop; ++i) {
      if (::send(fd, hello.data() + i, 1, MSG_NOSIGNAL) != 1) break;  // cut: reconnect
      // Sleep in small steps, so `stop` ends the client soon.
      const auto until = Clock::now() + gap;
      while (!stop && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      char c;
      if (::recv(fd, &c, 1, MSG_DONTWAIT) == 0) break;  // the server closed: reconnect
    }
    ::close(fd);
  }
}

TEST_F(TlsPortTest, TricklingHandshakesNeitherStallRequestsNorStop) {
  std::unique_ptr<TlsServer> server = Start();
  const int port = server->port();
  const std::string d = dir_.path();

  const std::string hello = ClientHello();
  ASSERT_GT(hello.size(), 100u);
  std::atomic<bool> stop{false};
  std::atomic<int> connects{0};
  std::vector<std::thread> slow;
  for (int i = 0; i < 8; ++i) {
    slow.emplace_back([&] { Trickle(port, hello, std::chrono::seconds(2), stop, connects); });
  }
  // Let them take their places, then ask normally for ~15 s (past the
  // handshake deadline, so the slow clients are cut and come back).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  HttpsOptions o;
  o.ca_file = d + "/agent.crt";
  o.timeout = absl::Seconds(4);
  int answered = 0, late = 0, asked = 0;
  std::vector<std::string> failures;
  const auto end = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < end) {
    ++asked;
    const auto t0 = Clock::now();
    auto r = HttpsGet("https://127.0.0.1:" + std::to_string(port), "/v1/pods", o);
    const auto took = Clock::now() - t0;
    if (r.ok() && r->status == 200 && took <= std::chrono::seconds(3)) {
      ++answered;
    } else {
      ++late;
      if (failures.size() < 3) {
        failures.push_back(
            (r.ok() ? "HTTP " + std::to_string(r->status) : std::string(r.status().message())) +
            " after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
            " ms");
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(late, 0) << answered << " of " << asked << " answered within 3 s; e.g. "
                     << ::testing::PrintToString(failures);
  EXPECT_GT(asked, 3);
  EXPECT_GE(connects.load(), 8);

  // Stop while they still trickle.
  auto stopped = std::async(std::launch::async, [&] {
    const auto t0 = Clock::now();
    server->Stop();
    return Clock::now() - t0;
  });
  const bool in_time = stopped.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  EXPECT_TRUE(in_time) << "Stop() did not return within 5 s of being asked";
  stop = true;  // lets a stalled Stop() finish, so the test ends either way
  for (std::thread& t : slow) t.join();
  stopped.wait();
}

// Two clients that connect and send nothing: Stop() returns at once rather
// than at their handshake deadline (20 s here).
TEST_F(TlsPortTest, StopDoesNotWaitForSilentClients) {
  TlsServerOptions to;
  to.handshake_timeout = absl::Seconds(20);
  to.read_timeout = absl::Seconds(20);
  std::unique_ptr<TlsServer> server = Start(to);
  std::vector<int> silent;
  for (int i = 0; i < 2; ++i) silent.push_back(ConnectTo(server->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // accepted, in the handshake
  const auto t0 = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  for (int fd : silent) {
    char c;
    EXPECT_EQ(::read(fd, &c, 1), 0) << "the server closed it";
    ::close(fd);
  }
}

// With every descriptor in use, connections wait in the backlog and the
// listener stays readable: the acceptor must not spin on accept4 (EMFILE).
TEST_F(TlsPortTest, OutOfDescriptorsTheAcceptorDoesNotSpin) {
  std::unique_ptr<TlsServer> server = Start();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  const int reserve = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(OpenFds() + 8);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> clients;
  for (int i = 0; i < 64; ++i) {
    const int fd = ConnectTo(server->port());
    if (fd < 0) break;  // out of descriptors
    clients.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the server takes its share
  }
  // One more that the server cannot accept: it stays in the backlog.
  ::close(reserve);
  const int pending = ConnectTo(server->port());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu0 = CpuSeconds();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double cpu = CpuSeconds() - cpu0;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_GE(pending, 0);
  // A spinning acceptor burns most of a core (seconds here); a paused one
  // wakes a few times a second.
  EXPECT_LT(cpu, 0.6) << "process CPU over 3 s with connections waiting in the backlog";
  for (int fd : clients) ::close(fd);
  if (pending >= 0) ::close(pending);
  // And it serves again once descriptors are back.
  HttpsOptions o;
  o.insecure = true;
  o.timeout = absl::Seconds(10);
  auto r = HttpsGet("https://127.0.0.1:" + std::to_string(server->port()), "/v1/pods", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

TEST_F(TlsPortTest, HeadGetsTheHeadWithoutTheBody) {
  std::unique_ptr<TlsServer> server = Start();
  const std::string get =
      RawTls(server->port(), "GET /v1/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string head =
      RawTls(server->port(), "HEAD /v1/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_THAT(get, ::testing::StartsWith("HTTP/1.1 200"));
  ASSERT_THAT(head, ::testing::StartsWith("HTTP/1.1 200"));
  const std::string body = "{\"path\":\"/v1/pods\"}\n";
  EXPECT_THAT(get, ::testing::EndsWith("\r\n\r\n" + body));
  EXPECT_THAT(head, ::testing::HasSubstr("Content-Length: " + std::to_string(body.size())));
  EXPECT_THAT(head, ::testing::EndsWith("\r\n\r\n")) << "a body after the head of a HEAD";
}

}  // namespace
}  // namespace fabric::podsapi
