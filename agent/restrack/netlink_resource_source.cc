#include "agent/restrack/netlink_resource_source.h"

#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/base/mono_clock.h"
#include "agent/base/utf8.h"
#include "agent/netns/rdma_netlink_wire.h"
#include "agent/restrack/restrack_wire.h"

namespace fabric::restrack {
namespace {

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

// A dump message is at most 32 KiB (the kernel caps its dump skbs there).
constexpr size_t kReceiveBufferBytes = 64 * 1024;
constexpr size_t kMaxReasons = 8;

struct MnlCloser {
  void operator()(mnl_socket* s) const { mnl_socket_close(s); }
};
using MnlSocket = std::unique_ptr<mnl_socket, MnlCloser>;

class MnlConnection : public NetlinkConnection {
 public:
  explicit MnlConnection(MnlSocket s) : s_(std::move(s)) {}
  uint32_t PortId() const override { return mnl_socket_get_portid(s_.get()); }
  int Send(const void* buf, size_t len) override {
    if (mnl_socket_sendto(s_.get(), buf, len) < 0) return errno;
    return 0;
  }
  int Receive(void* buf, size_t len, size_t* received) override {
    ssize_t n = mnl_socket_recvfrom(s_.get(), buf, len);
    if (n < 0) return errno;
    *received = static_cast<size_t>(n);
    return 0;
  }

 private:
  MnlSocket s_;
};

std::string ErrnoText(int err) {
  const char* desc = ::strerrordesc_np(err);
  return absl::StrCat(wire::ErrnoName(err), " (", desc ? desc : "unknown error", ")");
}

absl::Status SocketError(int err, absl::string_view op, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(op, " ", what, ": ", ErrnoText(err)));
}

// How one device's dumps ended, when not with an error for the whole Dump.
enum class DeviceEnd { kDumped, kVanished, kFailed };

// A request's outcome that the caller decides about (anything else is an
// error status already).
struct Outcome {
  enum class Kind { kComplete, kRestart, kKernelError } kind = Kind::kComplete;
  int kernel_errno = 0;
  std::string why;  // for kRestart
};

// The state of one Dump(): its connection, sequence numbers, deadline, notes.
class DumpRun {
 public:
  DumpRun(const ConnectionFactory& connect, const NetlinkSourceOptions& options)
      : connect_(connect),
        options_(options),
        deadline_(MonotonicNow() + options.dump_timeout),
        receive_buffer_(kReceiveBufferBytes),
        request_buffer_(MNL_SOCKET_BUFFER_SIZE) {}

  absl::StatusOr<std::vector<RdmaResource>> Run() {
    absl::Status st = Connect();
    if (!st.ok()) return st;
    st = RequireSharedNetnsMode();
    if (!st.ok()) return st;
    absl::StatusOr<std::vector<wire::DeviceHandle>> devices = ListDevices();
    if (!devices.ok()) return devices.status();
    std::vector<RdmaResource> all;
    size_t dumped = 0;
    absl::Status first_failure = absl::OkStatus();
    for (const wire::DeviceHandle& dev : *devices) {
      std::vector<RdmaResource> mine;
      DeviceEnd end = DeviceEnd::kDumped;
      for (ResourceKind kind : {ResourceKind::kQp, ResourceKind::kCq, ResourceKind::kMr,
                                ResourceKind::kPd, ResourceKind::kCtx}) {
        if (kind == ResourceKind::kCtx && !notes.contexts_missing.empty()) break;
        st = DumpOne(dev, kind, &mine, &end);
        if (!st.ok()) return st;
        if (end != DeviceEnd::kDumped) break;
      }
      if (end == DeviceEnd::kVanished) {
        ++notes.vanished_devices;
        continue;
      }
      if (end == DeviceEnd::kFailed) {  // named in notes.failed_devices
        if (first_failure.ok()) first_failure = last_failure_;
        continue;
      }
      ++dumped;
      all.insert(all.end(), std::make_move_iterator(mine.begin()),
                 std::make_move_iterator(mine.end()));
    }
    // Every device refused the same way is the kernel's answer, not one
    // device's trouble: say so for the whole Dump.
    if (dumped == 0 && !notes.failed_devices.empty()) return first_failure;
    return all;
  }

  DumpNotes notes;

 private:
  absl::Status Connect() {
    conn_.reset();
    absl::StatusOr<std::unique_ptr<NetlinkConnection>> c = connect_();
    if (!c.ok()) return c.status();
    conn_ = std::move(*c);
    return absl::OkStatus();
  }

  // Sends `request` and feeds its answer to `sink` until the dump ends.
  absl::StatusOr<Outcome> Transact(nlmsghdr* request, wire::MessageSink& sink,
                                   const std::string& what) {
    const uint32_t seq = request->nlmsg_seq = NextSeq();
    int err;
    do {
      err = conn_->Send(request, request->nlmsg_len);
    } while (err == EINTR && MonotonicNow() < deadline_);
    if (err != 0) return SocketError(err, "send", what);
    const uint32_t portid = conn_->PortId();
    for (;;) {
      if (MonotonicNow() >= deadline_) {
        return absl::DeadlineExceededError(absl::StrCat(
            what, ": no complete answer within ", absl::FormatDuration(options_.dump_timeout)));
      }
      size_t n = 0;
      err = conn_->Receive(receive_buffer_.data(), receive_buffer_.size(), &n);
      if (err == EINTR) continue;
      if (err == ENOBUFS) {
        return Outcome{Outcome::Kind::kRestart, 0, "the socket's receive buffer overran (ENOBUFS)"};
      }
      if (err == EAGAIN || err == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": the kernel did not answer in time (", ErrnoText(err), ")"));
      }
      if (err != 0) return SocketError(err, "receive", what);
      wire::FeedResult r =
          wire::FeedBuffer(absl::string_view(receive_buffer_.data(), n), seq, portid, sink, what);
      switch (r.state) {
        case wire::FeedResult::State::kMore:
          continue;
        case wire::FeedResult::State::kDone:
          return Outcome{};
        case wire::FeedResult::State::kKernelError:
          return Outcome{Outcome::Kind::kKernelError, r.kernel_errno, {}};
        case wire::FeedResult::State::kInterrupted:
          return Outcome{Outcome::Kind::kRestart, 0,
                         "the kernel marked the dump inconsistent (NLM_F_DUMP_INTR)"};
        case wire::FeedResult::State::kFailed:
          return r.error;
      }
    }
  }

  static bool Transient(int kernel_errno) {
    return kernel_errno == EINTR || kernel_errno == EAGAIN || kernel_errno == EBUSY;
  }

  // Give up after the last attempt, saying why.
  absl::Status Exhausted(const Outcome& o, const std::string& what) {
    if (o.kind == Outcome::Kind::kKernelError) {  // transient errnos only: still unavailable
      return absl::UnavailableError(
          wire::KernelErrorStatus(o.kernel_errno,
                                  absl::StrCat(what, " (", options_.attempts, " attempts)"))
              .message());
    }
    return absl::UnavailableError(
        absl::StrCat(what, ": ", o.why, " on each of ", options_.attempts, " attempts"));
  }

  absl::StatusOr<std::vector<wire::DeviceHandle>> ListDevices() {
    const std::string what = "RDMA_NLDEV_CMD_GET (the RDMA device list)";
    for (int attempt = 1;; ++attempt) {
      wire::DeviceListParser parser(what);
      absl::StatusOr<Outcome> o =
          Transact(wire::PutDeviceListDump(request_buffer_.data()), parser, what);
      if (!o.ok()) return o.status();
      if (o->kind == Outcome::Kind::kComplete) return parser.devices();
      absl::Status st = Connect();  // the old socket may hold the rest of the dump
      if (!st.ok()) return st;
      if (o->kind == Outcome::Kind::kKernelError && !Transient(o->kernel_errno)) {
        return wire::KernelErrorStatus(o->kernel_errno, what);
      }
      if (attempt >= options_.attempts) return Exhausted(*o, what);
      ++notes.retried_dumps;
    }
  }

  // In the exclusive RDMA netns mode a netns sees only the devices bound to it:
  // every resource of a device moved into a Pod, or of any device when this
  // process is not in the host's netns, is out of sight, and an empty dump
  // would read as "nobody uses the fabric". Kernels before 5.2 have neither
  // the mode nor SYS_GET: shared.
  absl::Status RequireSharedNetnsMode() {
    const std::string what = "RDMA_NLDEV_CMD_SYS_GET (the RDMA netns mode)";
    struct ModeSink : wire::MessageSink {
      absl::Status OnMessage(absl::string_view message) override {
        netns::NetnsMode m;
        switch (
            netns::wire::ParseNetnsMode(reinterpret_cast<const nlmsghdr*>(message.data()), &m)) {
          case netns::wire::ParseResult::kOk:
            mode = m;
            return absl::OkStatus();
          case netns::wire::ParseResult::kAbsent:
            return absl::OkStatus();
          case netns::wire::ParseResult::kMalformed:
            break;
        }
        return absl::InvalidArgumentError("RDMA_NLDEV_CMD_SYS_GET reply: malformed");
      }
      std::optional<netns::NetnsMode> mode;
    } sink;
    std::vector<uint64_t> aligned(MNL_SOCKET_BUFFER_SIZE / sizeof(uint64_t));
    absl::StatusOr<Outcome> o =
        Transact(netns::wire::PutSysGet(reinterpret_cast<char*>(aligned.data())), sink, what);
    if (!o.ok()) return o.status();
    if (o->kind != Outcome::Kind::kComplete) {
      // No such command (EOPNOTSUPP, EINVAL): no modes either. Anything else
      // is a socket in trouble, for the device list to find out again.
      return Connect();
    }
    if (sink.mode == netns::NetnsMode::kExclusive) {
      return absl::FailedPreconditionError(
          "the kernel's RDMA netns mode is exclusive (rdma system set netns exclusive): a network "
          "namespace sees only the RDMA devices bound to it, so the resources of the node's "
          "devices and of devices moved into Pods cannot be observed from here");
    }
    return absl::OkStatus();
  }

  // Whether the device is still listed: tells a device that disappeared from
  // a kernel that refuses the request.
  absl::StatusOr<bool> DevicePresent(uint32_t index) {
    absl::StatusOr<std::vector<wire::DeviceHandle>> devices = ListDevices();
    if (!devices.ok()) return devices.status();
    for (const wire::DeviceHandle& d : *devices) {
      if (d.index == index) return true;
    }
    return false;
  }

  // A failure of this one device: its resources are left out and the others'
  // kept, so one device in reset costs its own Pods' verdicts, not the node's.
  absl::Status DeviceFailed(const wire::DeviceHandle& dev, const absl::Status& why,
                            DeviceEnd* end) {
    *end = DeviceEnd::kFailed;
    notes.failed_devices[SanitizeUtf8(dev.name)] = std::string(why.message());
    last_failure_ = why;
    return absl::OkStatus();
  }

  absl::Status DumpOne(const wire::DeviceHandle& dev, ResourceKind kind,
                       std::vector<RdmaResource>* out, DeviceEnd* end) {
    const std::string what = absl::StrCat(wire::CommandName(kind), " for RDMA device ",
                                          EscapeBytes(dev.name), " (index ", dev.index, ")");
    for (int attempt = 1;; ++attempt) {
      wire::ResourceDumpParser parser(kind, dev.index, options_.max_entries - entries_seen_, what);
      absl::StatusOr<Outcome> o =
          Transact(wire::PutResourceDump(request_buffer_.data(), kind, dev.index), parser, what);
      if (!o.ok()) return o.status();
      if (o->kind == Outcome::Kind::kComplete) {
        entries_seen_ += parser.entries_seen();
        notes.rejected_entries += parser.rejected();
        for (const std::string& r : parser.reasons()) {
          if (notes.reasons.size() < kMaxReasons) notes.reasons.push_back(r);
        }
        out->insert(out->end(), std::make_move_iterator(parser.resources().begin()),
                    std::make_move_iterator(parser.resources().end()));
        return absl::OkStatus();
      }
      absl::Status st = Connect();  // the old socket may hold the rest of the dump
      if (!st.ok()) return st;
      if (o->kind == Outcome::Kind::kKernelError && !Transient(o->kernel_errno)) {
        absl::StatusOr<bool> present = DevicePresent(dev.index);
        if (!present.ok()) return present.status();
        if (!*present) {
          *end = DeviceEnd::kVanished;
          return absl::OkStatus();
        }
        absl::Status e = wire::KernelErrorStatus(o->kernel_errno, what);
        if (kind == ResourceKind::kCtx) {
          // Contexts only name the owners of resources whose creators are
          // gone: without them the device's resources are still whole. nldev
          // answers EINVAL for an operation it does not have (before Linux
          // 5.14); anything else is noted too, and contexts are not asked for
          // again this Dump.
          notes.contexts_missing =
              o->kernel_errno == EINVAL || o->kernel_errno == EOPNOTSUPP
                  ? absl::StrCat(e.message(), "; this kernel has no context dump (Linux 5.14+)")
                  : std::string(e.message());
          return absl::OkStatus();
        }
        if (o->kernel_errno == EINVAL) {
          // nldev answers EINVAL for an operation it does not have: the
          // kernel's limit, the same for every device.
          return absl::UnimplementedError(
              absl::StrCat(e.message(),
                           "; the device still exists, so this kernel has no such dump (QP "
                           "dumps need Linux 4.16, CQ/MR/PD dumps 4.18)"));
        }
        // The device's own failure: a driver whose ib_query_qp fails while the
        // device resets or a QP is torn down, or that cannot query at all.
        return DeviceFailed(dev, e, end);
      }
      if (attempt >= options_.attempts) {
        absl::Status e = Exhausted(*o, what);
        if (o->kind == Outcome::Kind::kKernelError && kind == ResourceKind::kCtx) {
          notes.contexts_missing = std::string(e.message());
          return absl::OkStatus();
        }
        if (o->kind == Outcome::Kind::kKernelError) return DeviceFailed(dev, e, end);
        return e;  // the socket's trouble (overruns, interrupted dumps): every device's
      }
      ++notes.retried_dumps;
    }
  }

  uint32_t NextSeq() {
    if (++seq_ == 0) ++seq_;  // 0 would turn libmnl's sequence check off
    return seq_;
  }

  const ConnectionFactory& connect_;
  const NetlinkSourceOptions& options_;
  const absl::Time deadline_;
  std::unique_ptr<NetlinkConnection> conn_;
  uint32_t seq_ = static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now()));
  size_t entries_seen_ = 0;
  absl::Status last_failure_;
  std::vector<char> receive_buffer_;
  std::vector<char> request_buffer_;
};

class NetlinkResourceSource : public ResourceSource {
 public:
  NetlinkResourceSource(ConnectionFactory connect, NetlinkSourceOptions options)
      : connect_(std::move(connect)), options_(options) {}

  absl::StatusOr<std::vector<RdmaResource>> Dump() override {
    DumpRun run(connect_, options_);
    absl::StatusOr<std::vector<RdmaResource>> result = run.Run();
    std::lock_guard<std::mutex> lock(mu_);
    notes_ = std::move(run.notes);
    return result;
  }

  DumpNotes LastDumpNotes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return notes_;
  }

 private:
  const ConnectionFactory connect_;
  const NetlinkSourceOptions options_;
  mutable std::mutex mu_;
  DumpNotes notes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NetlinkConnection>> OpenNetlinkConnection(
    absl::Duration receive_timeout) {
  MnlSocket s(mnl_socket_open2(NETLINK_RDMA, SOCK_CLOEXEC));
  if (!s) {
    const int err = errno;
    absl::Status st = SocketError(err, "open", "NETLINK_RDMA socket");
    if (err == EPROTONOSUPPORT) {
      return absl::UnavailableError(
          absl::StrCat(st.message(), "; this kernel has no RDMA netlink: is ib_core loaded?"));
    }
    return st;
  }
  timeval tv = absl::ToTimeval(receive_timeout);
  if (setsockopt(mnl_socket_get_fd(s.get()), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
    return SocketError(errno, "set SO_RCVTIMEO on", "NETLINK_RDMA socket");
  }
  if (mnl_socket_bind(s.get(), 0, MNL_SOCKET_AUTOPID) < 0) {
    return SocketError(errno, "bind", "NETLINK_RDMA socket");
  }
  return std::unique_ptr<NetlinkConnection>(new MnlConnection(std::move(s)));
}

std::unique_ptr<ResourceSource> NewNetlinkResourceSource(ConnectionFactory connect,
                                                         NetlinkSourceOptions options) {
  return std::make_unique<NetlinkResourceSource>(std::move(connect), options);
}

std::unique_ptr<ResourceSource> OpenNetlinkResourceSource() {
  return NewNetlinkResourceSource([] { return OpenNetlinkConnection(); });
}

}  // namespace fabric::restrack
