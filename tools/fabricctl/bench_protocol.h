// The out-of-band control channel of `fabricctl bench`: a plain TCP socket
// carrying length-prefixed frames (big-endian integers) that exchange the
// endpoint addresses, MR keys and buffer addresses before any RMA happens.
//
//   client -> server  Hello    (requested provider, size, batch, threads, client endpoint names)
//   server -> client  Welcome  (status, server provider/domain, per endpoint: name, addr, key)
//   client -> server  Done     (measurement over; the server stops progressing)
//   server -> client  Bye
#ifndef FABRIC_TOOLS_FABRICCTL_BENCH_PROTOCOL_H_
#define FABRIC_TOOLS_FABRICCTL_BENCH_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

enum class FrameType : uint8_t { kHello = 1, kWelcome = 2, kDone = 3, kBye = 4 };

struct Hello {
  std::string provider;  // requested (core) provider name
  uint64_t size = 0;
  uint32_t batch = 0;
  uint32_t threads = 0;
  std::string client_provider;  // what the client opened, for the server's log
  std::string client_domain;
  std::vector<std::string> endpoint_names;  // fi_getname per client endpoint
  bool operator==(const Hello&) const = default;
};

struct RemoteBuffer {
  std::string endpoint_name;  // fi_getname of the server endpoint
  uint64_t addr = 0;          // target address for RMA (VA or 0 per FI_MR_VIRT_ADDR)
  uint64_t key = 0;           // fi_mr_key
  bool operator==(const RemoteBuffer&) const = default;
};

struct Welcome {
  uint32_t status = 0;  // 0: ready; else the server refused (message says why)
  std::string message;
  std::string provider;  // what the server opened
  std::string fabric;
  std::string domain;
  std::vector<RemoteBuffer> buffers;  // one per client endpoint, same order
  bool operator==(const Welcome&) const = default;
};

// Encoding includes the frame type byte; Decode checks it and every length.
std::string EncodeHello(const Hello& m);
std::string EncodeWelcome(const Welcome& m);
std::string EncodeEmpty(FrameType t);
absl::StatusOr<Hello> DecodeHello(const std::string& frame);
absl::StatusOr<Welcome> DecodeWelcome(const std::string& frame);
absl::Status ExpectEmpty(const std::string& frame, FrameType t);

// A socket file descriptor, closed on destruction.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& o) noexcept : fd_(o.release()) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// Listening TCP socket on host:port (host "" = any IPv4/IPv6 address; port 0
// = ephemeral). BoundPort reads the port back.
absl::StatusOr<ScopedFd> ListenTcp(const HostPort& at);
absl::StatusOr<uint16_t> BoundPort(int fd);
absl::StatusOr<ScopedFd> AcceptOne(int listen_fd, double timeout_s);
absl::StatusOr<ScopedFd> ConnectTcp(const HostPort& to, double timeout_s);
// Numeric local address of a connected socket ("127.0.0.1", "fe80::1").
absl::StatusOr<std::string> LocalAddress(int fd);

// Frames: u32 big-endian length, then the payload (at most 1 MiB).
absl::Status SendFrame(int fd, const std::string& payload);
absl::StatusOr<std::string> RecvFrame(int fd, double timeout_s);
// True if a frame (or EOF) is waiting; never blocks.
bool Readable(int fd);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_BENCH_PROTOCOL_H_
