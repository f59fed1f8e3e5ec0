#include "agent/netns/rdma_netlink_mnl.h"

#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/unique_fd.h"
#include "agent/netns/netns_path.h"
#include "agent/netns/rdma_netlink_wire.h"

namespace fabric::netns {
namespace {

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

struct MnlCloser {
  void operator()(mnl_socket* s) const { mnl_socket_close(s); }
};
using MnlSocket = std::unique_ptr<mnl_socket, MnlCloser>;

absl::Status WithHint(absl::Status s, absl::string_view hint) {
  return absl::Status(s.code(), absl::StrCat(s.message(), " (", hint, ")"));
}

absl::StatusOr<MnlSocket> OpenSocketHere() {
  MnlSocket s(mnl_socket_open(NETLINK_RDMA));
  if (!s) {
    int err = errno;
    absl::Status st = ErrnoError(err, "open", "NETLINK_RDMA socket");
    if (err == EPROTONOSUPPORT) {
      return WithHint(absl::UnavailableError(st.message()),
                      "this kernel has no RDMA netlink: is ib_core loaded?");
    }
    return st;
  }
  if (mnl_socket_bind(s.get(), 0, MNL_SOCKET_AUTOPID) < 0) {
    return ErrnoError(errno, "bind", "NETLINK_RDMA socket");
  }
  return s;
}

// A socket created inside netns `fd`: a short-lived thread enters the netns
// (setns affects only the calling thread), creates the socket and exits.
absl::StatusOr<MnlSocket> OpenSocketInFd(int fd, const std::string& what) {
  absl::StatusOr<MnlSocket> result = absl::UnknownError("not run");
  std::thread t([&] {
    if (::setns(fd, CLONE_NEWNET) != 0) {
      result = ErrnoError(errno, "enter netns", what);
      return;
    }
    result = OpenSocketHere();
  });
  t.join();
  return result;
}

// Refuses anything that is not a network namespace, without blocking on it.
absl::StatusOr<UniqueFd> OpenNetns(const std::string& path) {
  auto fd = OpenNetnsFd(path);
  if (!fd.ok()) return fd.status();
  return UniqueFd(*fd);
}

absl::StatusOr<MnlSocket> OpenSocketIn(const std::string& netns_path) {
  if (netns_path.empty()) return OpenSocketHere();
  auto fd = OpenNetns(netns_path);
  if (!fd.ok()) return fd.status();
  return OpenSocketInFd(fd->get(), netns_path);
}

unsigned NextSeq() {
  static std::atomic<unsigned> seq{static_cast<unsigned>(::time(nullptr))};
  return seq++;
}

// Sends `nlh` and runs `cb` over every reply until the ack / NLMSG_DONE. On a
// kernel error, errno is returned through `*err`.
absl::Status Transact(mnl_socket* s, nlmsghdr* nlh, mnl_cb_t cb, void* data, int* err) {
  *err = 0;
  unsigned seq = nlh->nlmsg_seq = NextSeq();
  unsigned portid = mnl_socket_get_portid(s);
  if (mnl_socket_sendto(s, nlh, nlh->nlmsg_len) < 0) {
    *err = errno;
    return absl::OkStatus();
  }
  std::vector<char> buf(64 * 1024);
  int ret;
  do {
    ssize_t n = mnl_socket_recvfrom(s, buf.data(), buf.size());
    if (n < 0) {
      *err = errno;
      return absl::OkStatus();
    }
    ret = mnl_cb_run(buf.data(), n, seq, portid, cb, data);
  } while (ret > MNL_CB_STOP);
  if (ret < 0) *err = errno;
  return absl::OkStatus();
}

int OnDevice(const nlmsghdr* nlh, void* data) {
  RdmaLink link;
  switch (wire::ParseDevice(nlh, &link)) {
    case wire::ParseResult::kOk:
      static_cast<std::vector<RdmaLink>*>(data)->push_back(std::move(link));
      return MNL_CB_OK;
    case wire::ParseResult::kAbsent:
      return MNL_CB_OK;
    case wire::ParseResult::kMalformed:
      break;
  }
  errno = EBADMSG;
  return MNL_CB_ERROR;
}

struct ModeReply {
  bool seen = false;
  NetnsMode mode = NetnsMode::kShared;
};

int OnSys(const nlmsghdr* nlh, void* data) {
  auto* reply = static_cast<ModeReply*>(data);
  switch (wire::ParseNetnsMode(nlh, &reply->mode)) {
    case wire::ParseResult::kOk:
      reply->seen = true;
      return MNL_CB_OK;
    case wire::ParseResult::kAbsent:
      return MNL_CB_OK;
    case wire::ParseResult::kMalformed:
      break;
  }
  errno = EBADMSG;
  return MNL_CB_ERROR;
}

absl::StatusOr<std::vector<RdmaLink>> Dump(mnl_socket* s, const std::string& where) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = wire::PutDevDump(buf.data());
  std::vector<RdmaLink> links;
  int err;
  auto st = Transact(s, nlh, OnDevice, &links, &err);
  if (!st.ok()) return st;
  if (err != 0) return ErrnoError(err, "list RDMA devices in netns", where);
  return links;
}

std::string NetnsLabel(const std::string& path) { return path.empty() ? "host" : path; }

}  // namespace

absl::StatusOr<std::unique_ptr<MnlRdmaNetlink>> MnlRdmaNetlink::Create() {
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return ErrnoError(errno, "socket", "AF_UNIX");
  int ns = ::ioctl(sock.get(), SIOCGSKNS);
  if (ns < 0) {
    return WithHint(ErrnoError(errno, "get own netns", "(SIOCGSKNS)"),
                    "needs CAP_NET_ADMIN and Linux >= 4.9");
  }
  ::fcntl(ns, F_SETFD, FD_CLOEXEC);
  return std::unique_ptr<MnlRdmaNetlink>(new MnlRdmaNetlink(ns));
}

MnlRdmaNetlink::~MnlRdmaNetlink() {
  if (host_netns_fd_ >= 0) ::close(host_netns_fd_);
}

absl::StatusOr<NetnsMode> MnlRdmaNetlink::GetNetnsMode() {
  auto s = OpenSocketHere();
  if (!s.ok()) return s.status();
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = wire::PutSysGet(buf.data());
  ModeReply reply;
  int err;
  auto st = Transact(s->get(), nlh, OnSys, &reply, &err);
  if (!st.ok()) return st;
  if (err != 0) return ErrnoError(err, "rdma system get", "(netns mode)");
  // Kernels before 5.3 have no attribute and no exclusive mode.
  return reply.seen ? reply.mode : NetnsMode::kShared;
}

absl::StatusOr<std::vector<RdmaLink>> MnlRdmaNetlink::ListDevices(const std::string& netns_path) {
  auto s = OpenSocketIn(netns_path);
  if (!s.ok()) return s.status();
  return Dump(s->get(), NetnsLabel(netns_path));
}

absl::Status MnlRdmaNetlink::MoveDevice(const std::string& device, const std::string& from_netns,
                                        const std::string& to_netns) {
  std::string what = absl::StrCat("move RDMA device ", device, " from netns ",
                                  NetnsLabel(from_netns), " to netns");
  auto s = OpenSocketIn(from_netns);
  if (!s.ok()) return WithHint(s.status(), what + " " + NetnsLabel(to_netns));
  auto links = Dump(s->get(), NetnsLabel(from_netns));
  if (!links.ok()) return links.status();
  const RdmaLink* link = nullptr;
  for (const auto& l : *links) {
    if (l.name == device) link = &l;
  }
  if (!link) {
    return absl::NotFoundError(
        absl::StrCat("RDMA device ", device, " is not in netns ", NetnsLabel(from_netns)));
  }
  UniqueFd target_fd;
  int target = host_netns_fd_;
  if (!to_netns.empty()) {
    auto fd = OpenNetns(to_netns);
    if (!fd.ok()) return fd.status();
    target_fd = std::move(*fd);
    target = target_fd.get();
  }
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = wire::PutDevSetNetns(buf.data(), link->index, static_cast<uint32_t>(target));
  int err;
  auto st = Transact(s->get(), nlh, nullptr, nullptr, &err);
  if (!st.ok()) return st;
  if (err == 0) return absl::OkStatus();
  absl::Status e = ErrnoError(err, what, NetnsLabel(to_netns));
  switch (err) {
    case EOPNOTSUPP:
      return WithHint(absl::UnimplementedError(e.message()),
                      "the kernel refused: the driver cannot change netns (e.g. EFA), or the "
                      "RDMA subsystem is in shared mode; see `rdma system`");
    case EBUSY:
      return WithHint(e, "device busy; retry");
    case EPERM:
      return WithHint(e, "needs CAP_NET_ADMIN over the target netns");
    default:
      return e;
  }
}

}  // namespace fabric::netns
