// The HTTP server against an NTP step of the wall clock. This binary
// replaces clock_gettime (the libraries' calls bind to this definition) so
// that CLOCK_REALTIME can be stepped while every other clock runs on; the
// server must measure its durations on the monotonic clock and not notice.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "agent/http/get.h"
#include "agent/metrics/http_server.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace {
std::atomic<int64_t> g_realtime_offset_ns{0};
}  // namespace

extern "C" int clock_gettime(clockid_t clock, struct timespec* ts) {
  const int rc = static_cast<int>(::syscall(SYS_clock_gettime, clock, ts));
  if (rc != 0 || (clock != CLOCK_REALTIME && clock != CLOCK_REALTIME_COARSE)) return rc;
  const int64_t ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + g_realtime_offset_ns.load();
  ts->tv_sec = ns / 1000000000LL;
  ts->tv_nsec = ns % 1000000000LL;
  return rc;
}

namespace fabric {
namespace {

// Steps the wall clock by `d` (negative: back, as NTP does on a fast clock).
void StepWallClock(absl::Duration d) { g_realtime_offset_ns += absl::ToInt64Nanoseconds(d); }

// A step forward must not expire a connection's read deadline early. The
// first half of a request, then an hour's step, then other requests (each
// runs the loop's deadline sweep), then the rest: it is answered.
TEST(HttpServerClockTest, AWallClockStepForwardDoesNotCutConnections) {
  HttpHandlers h;
  h.metrics = [] { return std::string("x 1\n"); };
  h.not_ready_reason = [] { return std::string(); };
  h.node_json = [] { return std::string("{}\n"); };
  HttpServer server(h, absl::Seconds(1));
  ASSERT_OK(server.Start("127.0.0.1:0"));
  const std::string base = "127.0.0.1:" + std::to_string(server.port());
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::write(fd, "GET /hea", 8), 8);
  ASSERT_OK(HttpGet(base, "/healthz"));  // the slow connection is accepted by now
  StepWallClock(absl::Hours(1));
  for (int i = 0; i < 3; ++i) {
    auto r = HttpGet(base, "/healthz");
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 200);
  }
  const std::string rest = "lthz HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[1024];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(resp.rfind("HTTP/1.1 200", 0), 0u) << "closed: [" << resp << "]";
  StepWallClock(absl::Hours(-1));
  server.Stop();
}

// Issue 19 item 5: the /metrics cache measured its age on the wall clock. A
// step back of an hour made the cached body "fresh" for an hour: every
// scrape got the same frozen numbers. Scrapes go on until the cache (0.5 s)
// has aged three times over on the monotonic clock; a re-render must come.
TEST(HttpServerClockTest, AWallClockStepBackDoesNotFreezeTheCache) {
  std::atomic<int> renders{0};
  HttpHandlers h;
  h.metrics = [&] {
    return "fabric_build_info{version=\"" + std::to_string(++renders) + "\"} 1\n";
  };
  h.not_ready_reason = [] { return std::string(); };
  h.node_json = [] { return std::string("{}\n"); };
  HttpServer server(h, absl::Milliseconds(500));
  ASSERT_OK(server.Start("127.0.0.1:0"));
  const std::string base = "127.0.0.1:" + std::to_string(server.port());
  ASSERT_OK(HttpGet(base, "/metrics"));
  ASSERT_EQ(renders.load(), 1);
  StepWallClock(absl::Hours(-1));
  const auto t0 = std::chrono::steady_clock::now();
  int rounds = 0;
  while (renders.load() < 2 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a scraper's pace
    auto r = HttpGet(base, "/metrics");
    ASSERT_OK(r);
    EXPECT_EQ(r->status, 200);
    ++rounds;
  }
  EXPECT_GE(renders.load(), 2) << "the cache stayed fresh for " << rounds << " scrapes";
  StepWallClock(absl::Hours(1));
  server.Stop();
}

}  // namespace
}  // namespace fabric
