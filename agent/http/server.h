// The agent's one HTTP/1.1 server core, for the plain port (/metrics, probes,
// /v1/node; agent/metrics/http_server.h) and the TLS port (/v1/pods;
// agent/podsapi/tls_server.h). One request per connection, "Connection:
// close", built so that no client can hold what other clients need:
//  - one event-loop thread (poll) owns every socket, all I/O non-blocking,
//    TLS handshakes included (SSL_accept driven by the same loop): a client
//    that sends or reads slowly, or trickles its ClientHello, occupies a
//    slot, never a thread;
//  - deadlines from the connect: the handshake (TLS) and the full request
//    head, then the route's answer, then the sending of it; each on the
//    monotonic clock (an NTP step neither freezes nor expires them);
//  - connections are capped; at the cap the oldest connection that has not
//    sent its request yet is dropped for the new one (then the oldest of any
//    kind), so a probe always gets in; optionally at most N per client
//    address (the same rule within that address);
//  - accept4 failing for want of descriptors (EMFILE, ENFILE) pauses the
//    listener briefly instead of spinning on it;
//  - Stop() shuts every socket down and joins the loop: it never waits on a
//    client;
//  - HEAD gets the head (with the body's Content-Length) and no body.
// The route is called on the loop for each request head and must not block:
// it answers at once or hands the request to its own thread, which answers
// later with Respond() (any thread).
#ifndef FABRIC_AGENT_HTTP_SERVER_H_
#define FABRIC_AGENT_HTTP_SERVER_H_

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/base/logging.h"
#include "agent/http/net.h"
#include "agent/http/response.h"

namespace fabric {

// One request head, as the core hands it to the route.
struct HttpRequest {
  std::string path;          // the target up to '?'
  std::string query;         // after the first '?', "" without one
  std::string bearer_token;  // "Authorization: Bearer <token>", "" without one
  bool loopback = false;     // the peer is on this host's loopback
};

struct HttpServerCoreOptions {
  std::string flag = "--metrics-address";  // names the address in errors and logs
  Component log_component = Component::kMetrics;
  int max_connections = 64;
  int max_connections_per_peer = 0;                     // 0: no bound per client address
  absl::Duration handshake_timeout = absl::Seconds(5);  // TLS: connect -> handshake done
  absl::Duration read_timeout = absl::Seconds(5);       // connect -> full request head
  absl::Duration answer_timeout = absl::Seconds(30);    // request head -> the route's answer
  absl::Duration write_timeout = absl::Seconds(10);     // answer -> fully sent
  // The listener's pause after accept4 found no descriptor left.
  absl::Duration accept_backoff = absl::Milliseconds(200);
  // The core's own answers (400, 405, 431) as {"error": "..."} rather than text.
  bool json_errors = false;
  // TLS: the context for each new connection, called on the loop (it may
  // reload a certificate). Unset: plain TCP.
  std::function<SSL_CTX*()> tls_context;
};

class HttpServerCore {
 public:
  // Called on the loop thread; must not block (see the file comment).
  using Route = std::function<void(uint64_t id, const HttpRequest& request)>;

  HttpServerCore(HttpServerCoreOptions options, Route route);
  ~HttpServerCore();
  HttpServerCore(const HttpServerCore&) = delete;
  HttpServerCore& operator=(const HttpServerCore&) = delete;

  // Listens on `address` (net.h ListenTcp) and starts the loop.
  absl::Status Start(const std::string& address);
  // Closes every connection and the listener; returns once the loop ended.
  void Stop();
  int port() const { return port_; }
  // "host:port" as bound: the port picked for port 0, IPv6 in brackets.
  const std::string& bound_address() const { return bound_address_; }

  // Answers request `id` from any thread; ignored when its connection is
  // gone (closed by its deadline or its client). One answer per request.
  void Respond(uint64_t id, int status, std::string content_type,
               std::shared_ptr<const std::string> body);
  void Respond(uint64_t id, HttpAnswer answer);

  struct Counters {
    uint64_t accepted = 0;
    uint64_t tls_failures = 0;   // handshakes or TLS I/O that failed
    uint64_t timed_out = 0;      // connections closed by a deadline
    uint64_t evicted = 0;        // dropped for a newer connection at a cap
    uint64_t accept_pauses = 0;  // accept4 out of descriptors
  };
  Counters counters() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Conn;
  struct Answer {
    uint64_t id;
    int status;
    std::string content_type;
    std::shared_ptr<const std::string> body;
  };
  class Loop;

  void Wake();  // under mu_

  const HttpServerCoreOptions options_;
  const Route route_;
  UniqueFd listen_fd_, wake_fd_;
  int port_ = 0;
  std::string bound_address_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
  std::mutex mu_;  // answers_, and wake_fd_ once started
  std::vector<Answer> answers_;
  std::atomic<uint64_t> accepted_{0}, tls_failures_{0}, timed_out_{0}, evicted_{0},
      accept_pauses_{0};
};

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_SERVER_H_
