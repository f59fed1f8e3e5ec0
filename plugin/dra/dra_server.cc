#include "plugin/dra/dra_server.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"
#include "plugin/dra/dra_health_service.h"
#include "plugin/dra/dra_plugin_service.h"

namespace fabric::dra {
namespace {

// Identity of a socket file: inode numbers are reused after deletion, so the
// change time tells a re-created socket apart. 0: absent or not a socket.
uint64_t SocketIdentity(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  uint64_t id = st.st_ino * 0x9E3779B97F4A7C15ull;
  id ^= static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000007ull + st.st_ctim.tv_nsec;
  return id == 0 ? 1 : id;
}

}  // namespace

grpc::Status DraRegistrationService::GetInfo(grpc::ServerContext*,
                                             const pluginregistration::InfoRequest*,
                                             pluginregistration::PluginInfo* info) {
  info->set_type(kPluginType);
  info->set_name(driver_);
  info->set_endpoint(endpoint_);
  for (const std::string& v : versions_) info->add_supported_versions(v);
  return grpc::Status::OK;
}

grpc::Status DraRegistrationService::NotifyRegistrationStatus(
    grpc::ServerContext*, const pluginregistration::RegistrationStatus* status,
    pluginregistration::RegistrationStatusResponse*) {
  if (status->plugin_registered()) {
    LogInfo(Component::kRegistration, "DRA driver {}: registered with the kubelet", driver_);
  } else {
    LogError(Component::kRegistration, "DRA driver {}: the kubelet refused the registration: {}",
             driver_, EscapeBytes(status->error(), 512));
  }
  if (on_status_) on_status_(status->plugin_registered(), SanitizeUtf8(status->error()));
  return grpc::Status::OK;
}

struct DraServer::Served {
  std::string socket;
  std::unique_ptr<grpc::Server> server;
  uint64_t identity = 0;
};

DraServer::DraServer(DraServerOptions options, DraPluginService* plugin, DraHealthService* health)
    : options_(std::move(options)),
      plugin_(plugin),
      health_(health),
      plugin_dir_(absl::StrCat(options_.kubelet_root, "/plugins/", options_.driver)),
      registry_dir_(options_.plugins_registry_dir.empty()
                        ? options_.kubelet_root + "/plugins_registry"
                        : options_.plugins_registry_dir),
      plugin_socket_(plugin_dir_ + "/dra.sock"),
      registration_socket_(absl::StrCat(registry_dir_, "/", options_.driver, "-reg.sock")) {}

DraServer::~DraServer() { Stop(); }

absl::Status DraServer::StartPluginLocked() {
  StopServedLocked(&plugin_server_);
  auto served = std::make_unique<Served>();
  served->socket = plugin_socket_;
  ::unlink(plugin_socket_.c_str());  // a stale socket from an earlier run
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + plugin_socket_, grpc::InsecureServerCredentials());
  builder.RegisterService(plugin_->v1_service());
  builder.RegisterService(plugin_->v1beta1_service());
  if (health_ != nullptr) builder.RegisterService(health_);
  served->server = builder.BuildAndStart();
  if (!served->server) return absl::UnavailableError("cannot serve on " + plugin_socket_);
  served->identity = SocketIdentity(plugin_socket_);
  plugin_server_ = std::move(served);
  LogInfo(Component::kPlugin, "DRA driver {}: serving on {}", options_.driver, plugin_socket_);
  return absl::OkStatus();
}

absl::Status DraServer::StartRegistrationLocked() {
  StopServedLocked(&registration_server_);
  registration_service_ = std::make_unique<DraRegistrationService>(
      options_.driver, plugin_socket_, [this](bool ok, const std::string& error) {
        std::lock_guard<std::mutex> lock(state_mu_);
        state_.registered = ok;
        state_.last_error = error;
        if (ok) ++state_.registrations;
      });
  auto served = std::make_unique<Served>();
  served->socket = registration_socket_;
  ::unlink(registration_socket_.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + registration_socket_, grpc::InsecureServerCredentials());
  builder.RegisterService(registration_service_.get());
  served->server = builder.BuildAndStart();
  if (!served->server) return absl::UnavailableError("cannot serve on " + registration_socket_);
  served->identity = SocketIdentity(registration_socket_);
  registration_server_ = std::move(served);
  LogInfo(Component::kRegistration, "DRA driver {}: registration socket {}", options_.driver,
          registration_socket_);
  return absl::OkStatus();
}

void DraServer::StopServedLocked(std::unique_ptr<Served>* served) {
  if (!*served) return;
  if (served == &plugin_server_ && health_ != nullptr) health_->EndStreams();
  (*served)->server->Shutdown(GrpcDeadlineAfter(std::chrono::milliseconds(500)));
  (*served)->server->Wait();
  // Remove the socket only if it is still the one we created.
  if ((*served)->identity != 0 && SocketIdentity((*served)->socket) == (*served)->identity) {
    ::unlink((*served)->socket.c_str());
  }
  served->reset();
  if (served == &registration_server_) {
    std::lock_guard<std::mutex> lock(state_mu_);
    state_.registered = false;
  }
}

absl::Status DraServer::Start() {
  for (const std::string* path : {&plugin_socket_, &registration_socket_}) {
    if (path->size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError("socket path too long for a unix socket: " + *path);
    }
  }
  if (absl::Status s = MkdirAll(plugin_dir_, 0750); !s.ok()) return s;
  if (absl::Status s = MkdirAll(registry_dir_, 0750); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (running_) return absl::FailedPreconditionError("DRA server already started");
    if (absl::Status s = StartPluginLocked(); !s.ok()) return s;
    if (absl::Status s = StartRegistrationLocked(); !s.ok()) {
      StopServedLocked(&plugin_server_);
      return s;
    }
    running_ = true;
  }
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_fd_ < 0 || wake_fd_ < 0) {
    absl::Status s = ErrnoError(errno, inotify_fd_ < 0 ? "inotify_init1" : "eventfd", "");
    Stop();
    return s;
  }
  AddWatches();
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void DraServer::AddWatches() {
  const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF;
  for (const std::string& dir : {plugin_dir_, registry_dir_}) {
    if (IsDirectory(dir)) ::inotify_add_watch(inotify_fd_, dir.c_str(), mask);
  }
}

void DraServer::Run() {
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(options_.check_period));
  while (true) {
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int n = ::poll(fds, 2, timeout_ms);
    if (n < 0 && errno != EINTR) {
      LogError(Component::kRegistration, "DRA: poll: {}", std::strerror(errno));
      break;
    }
    if (n > 0 && (fds[1].revents & POLLIN)) break;  // Stop()
    if (n > 0 && (fds[0].revents & POLLIN)) {
      alignas(struct inotify_event) char buf[4096];
      bool rewatch = false;
      ssize_t len;
      while ((len = ::read(inotify_fd_, buf, sizeof(buf))) > 0) {
        for (char* p = buf; p < buf + len;) {
          auto* ev = reinterpret_cast<struct inotify_event*>(p);
          if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) rewatch = true;
          p += sizeof(struct inotify_event) + ev->len;
        }
      }
      if (rewatch) AddWatches();
    }
    Reconcile();
  }
}

void DraServer::Reconcile() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!running_) return;
  // The directories themselves may have gone (a kubelet root wiped).
  (void)MkdirAll(plugin_dir_, 0750);
  (void)MkdirAll(registry_dir_, 0750);
  bool restart_registration = false;
  if (!plugin_server_ || SocketIdentity(plugin_socket_) != plugin_server_->identity) {
    LogInfo(Component::kRegistration, "DRA: {} was removed; serving it again", plugin_socket_);
    if (absl::Status s = StartPluginLocked(); !s.ok()) {
      LogError(Component::kPlugin, "DRA: {}", s.message());
      return;  // retried at the next check
    }
    {
      std::lock_guard<std::mutex> state_lock(state_mu_);
      ++state_.socket_restarts;
    }
    // A fresh endpoint: let the kubelet register it again.
    restart_registration = true;
  }
  if (restart_registration || !registration_server_ ||
      SocketIdentity(registration_socket_) != registration_server_->identity) {
    if (!restart_registration) {
      LogInfo(Component::kRegistration, "DRA: {} was removed; serving it again",
              registration_socket_);
      std::lock_guard<std::mutex> state_lock(state_mu_);
      ++state_.socket_restarts;
    }
    if (absl::Status s = StartRegistrationLocked(); !s.ok()) {
      LogError(Component::kRegistration, "DRA: {}", s.message());
    }
  }
}

void DraServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    running_ = false;
  }
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    // Registration first: the kubelet stops using a plugin whose
    // registration socket is gone.
    StopServedLocked(&registration_server_);
    StopServedLocked(&plugin_server_);
    registration_service_.reset();
  }
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

DraRegistrationState DraServer::registration() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return state_;
}

}  // namespace fabric::dra
