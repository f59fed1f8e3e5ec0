// /v1/pods over TLS (--pods-tls-address): its own listener on the server core
// (agent/http/server.h), apart from the plain port, so /metrics, /healthz and
// /readyz keep their loop and their slots. The core's loop does every TLS
// handshake and read without blocking, under deadlines from the connect, and
// bounds the connections in all and per client address: a client that
// trickles its ClientHello holds a slot until the handshake deadline, never
// a thread. Complete requests go to a few worker threads (the handler asks
// the API server, which may block) through a bounded queue (full: 503). The
// certificate and key files are re-read when they change (a Secret update),
// checked at most every `reload_check`; a bad new pair keeps the old one
// serving.
#ifndef FABRIC_AGENT_PODSAPI_TLS_SERVER_H_
#define FABRIC_AGENT_PODSAPI_TLS_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/http/openssl.h"
#include "agent/http/response.h"
#include "agent/http/server.h"

namespace fabric::podsapi {

struct TlsServerOptions {
  std::string address;  // "host:port"; port 0 picks one (port())
  std::string cert_file, key_file;
  int workers = 2;
  size_t max_queued = 32;
  int max_connections = 64;
  // One client address (a Pod, or a node's hostNetwork Pods) gets at most
  // this many; its oldest unfinished one makes room for its newest.
  int max_connections_per_peer = 16;
  absl::Duration handshake_timeout = absl::Seconds(5);  // connect -> handshake done
  absl::Duration read_timeout = absl::Seconds(5);       // connect -> full request head
  absl::Duration answer_timeout = absl::Seconds(30);    // request -> the handler's answer
  absl::Duration write_timeout = absl::Seconds(10);
  absl::Duration reload_check = absl::Seconds(30);
};

struct TlsRequest {
  std::string path, query, bearer_token;
};
// May block (the API server's reviews): it runs on a worker.
using TlsHandler = std::function<HttpAnswer(const TlsRequest&)>;

class TlsServer {
 public:
  TlsServer(TlsServerOptions options, TlsHandler handler);
  ~TlsServer();

  // Loads the certificate (an error names the file) and listens.
  absl::Status Start();
  // Closes every connection at once; waits for the handlers in progress.
  void Stop();
  int port() const { return core_ ? core_->port() : 0; }

  uint64_t served() const { return served_.load(); }    // answered by the handler
  uint64_t dropped() const { return dropped_.load(); }  // 503: the queue was full
  uint64_t tls_failures() const { return core_ ? core_->counters().tls_failures : 0; }
  uint64_t reloads() const { return certificate_ ? certificate_->reloads() : 0; }

 private:
  struct Job {
    uint64_t id;
    TlsRequest request;
  };
  void Route(uint64_t id, const HttpRequest& request);  // on the core's loop
  void Work();

  const TlsServerOptions options_;
  const TlsHandler handler_;
  std::unique_ptr<ServerCertificate> certificate_;  // used on the core's loop only
  std::unique_ptr<HttpServerCore> core_;
  std::vector<std::thread> workers_;
  std::mutex mu_;  // queue_, stop_
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::atomic<uint64_t> served_{0}, dropped_{0};
};

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_PODSAPI_TLS_SERVER_H_
