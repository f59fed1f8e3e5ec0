// /v1/pods over TLS (--pods-tls-address): its own listener, apart from the
// plain HTTP server's poll loop, so /metrics, /healthz and /readyz keep their
// behaviour and none of their slots. One acceptor thread hands connections
// to a few worker threads through a bounded queue (full: the new connection
// is closed and counted); each worker does one request per connection with
// blocking I/O under deadlines (handshake, request head, response), so a slow
// or stalled client holds one worker for at most those. The certificate and
// key files are re-read when they change (a Secret update), checked at most
// every `reload_check`; a bad new pair keeps the old one serving.
#ifndef FABRIC_AGENT_PODSAPI_TLS_SERVER_H_
#define FABRIC_AGENT_PODSAPI_TLS_SERVER_H_

#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/http/openssl.h"
#include "agent/metrics/http_server.h"

namespace fabric::podsapi {

struct TlsServerOptions {
  std::string address;  // "host:port"; port 0 picks one (port())
  std::string cert_file, key_file;
  int workers = 2;
  size_t max_queued = 32;
  absl::Duration handshake_timeout = absl::Seconds(5);
  absl::Duration read_timeout = absl::Seconds(5);  // connect -> full request head
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
  void Stop();
  int port() const { return port_; }

  uint64_t served() const { return served_.load(); }
  uint64_t dropped() const { return dropped_.load(); }            // queue full
  uint64_t tls_failures() const { return tls_failures_.load(); }  // handshake or I/O
  uint64_t reloads() const { return reloads_.load(); }

 private:
  void Accept();
  void Work();
  void Handle(UniqueFd fd);
  void MaybeReload();
  SslPtr NewSsl();

  const TlsServerOptions options_;
  const TlsHandler handler_;
  UniqueFd listen_fd_, wake_fd_;
  int port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
  std::mutex mu_;  // queue_, stop_, ctx_, stamps
  std::condition_variable cv_;
  std::deque<UniqueFd> queue_;
  bool stop_ = false;
  SslCtxPtr ctx_;
  struct timespec cert_mtime_ = {}, key_mtime_ = {};
  absl::Time next_reload_check_;
  std::atomic<uint64_t> served_{0}, dropped_{0}, tls_failures_{0}, reloads_{0};
};

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_PODSAPI_TLS_SERVER_H_
