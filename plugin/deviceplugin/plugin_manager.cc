#include "plugin/deviceplugin/plugin_manager.h"

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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/logging.h"

namespace fabric {
namespace {

constexpr char kKubeletSocket[] = "kubelet.sock";
constexpr auto kRegisterTimeout = std::chrono::seconds(5);
constexpr int kRetryMs = 1000;
constexpr int kSafetyNetMs = 5000;  // lstat our sockets even without events

// Identity of a socket file: inode numbers are reused after deletion, so a
// re-created kubelet.sock can carry the old inode; the change time tells.
uint64_t SocketInode(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  uint64_t id = st.st_ino * 0x9E3779B97F4A7C15ull;
  id ^= static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000007ull + st.st_ctim.tv_nsec;
  return id == 0 ? 1 : id;
}

// One log line: the registration mode, and each kubelet path the agent uses,
// sorted into found, waited for, and absent but not needed. The kubelet's
// --root-dir moves plugins_registry/ and pod-resources/ but not
// device-plugins/ (k0s, MicroK8s), so a wrong path shows here, by name.
std::string DescribeKubeletPaths(const HostPaths& paths, RegistrationMode requested,
                                 RegistrationMode mode) {
  std::vector<std::string> found, waiting, unused;
  auto place = [&](bool present, bool needed, const char* what, const std::string& path) {
    (present ? found : needed ? waiting : unused).push_back(absl::StrCat(what, " ", path));
  };
  const std::string kubelet_sock = paths.DevicePluginDir() + "/" + kKubeletSocket;
  place(SocketInode(kubelet_sock) != 0, mode == RegistrationMode::kKubelet, "kubelet.sock",
        kubelet_sock);
  place(IsDirectory(paths.PluginsRegistryDir()), mode == RegistrationMode::kWatcher,
        "plugins_registry", paths.PluginsRegistryDir());
  // Without it per-Pod attribution and the cross-pool holds are blind.
  place(SocketInode(paths.PodResourcesSocket()) != 0, true, "pod-resources",
        paths.PodResourcesSocket());
  auto list = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("none") : absl::StrJoin(v, ", ");
  };
  std::string line = absl::StrCat(
      "registration: ", mode == RegistrationMode::kWatcher ? "plugin watcher" : "kubelet.sock",
      requested == RegistrationMode::kAuto ? " (auto)" : " (requested)", "; found: ", list(found),
      "; waiting for: ", list(waiting));
  if (!unused.empty()) absl::StrAppend(&line, "; absent, not needed: ", list(unused));
  return line;
}

}  // namespace

bool ParseRegistrationMode(const std::string& s, RegistrationMode* out) {
  if (s == "auto")
    *out = RegistrationMode::kAuto;
  else if (s == "kubelet")
    *out = RegistrationMode::kKubelet;
  else if (s == "watcher")
    *out = RegistrationMode::kWatcher;
  else
    return false;
  return true;
}

// One pool's gRPC server on its socket, and its registration state.
class PluginManager::PoolServer {
 public:
  PoolServer(std::shared_ptr<PoolState> pool, std::string socket, RegistrationMode mode,
             DevicePluginService::AllocateCheck check)
      : pool_(std::move(pool)), socket_(std::move(socket)), mode_(mode), check_(std::move(check)) {
    status_.resource = pool_->resource();
    status_.socket = socket_;
    status_.mode = mode_ == RegistrationMode::kWatcher ? "watcher" : "kubelet";
  }
  ~PoolServer() { Stop(); }

  absl::Status Start() {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
    if (retired_) return absl::CancelledError(absl::StrCat(socket_, " was removed"));
    StopLocked();
    if (socket_.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("socket path too long for a unix socket: ", socket_));
    }
    ::unlink(socket_.c_str());
    service_ = std::make_unique<DevicePluginService>(pool_, check_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    if (mode_ == RegistrationMode::kWatcher) {
      registration_ = std::make_unique<WatcherRegistrationService>(
          pool_->resource(), socket_, [this](bool ok, const std::string& error) {
            std::lock_guard<std::mutex> lock(mu_);
            status_.registered = ok;
            status_.last_error = error;
            if (ok) {
              status_.registrations++;
              status_.last_registered = absl::Now();
            }
          });
      builder.RegisterService(registration_.get());
    }
    server_ = builder.BuildAndStart();
    if (!server_) {
      return absl::UnavailableError(absl::StrCat("cannot serve on ", socket_));
    }
    inode_ = SocketInode(socket_);
    LogInfo(Component::kPlugin, "{}: serving on {}", pool_->resource(), socket_);
    return absl::OkStatus();
  }

  void Stop() {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
    StopLocked();
  }

  // Stops for good: a concurrent reconcile must not bring it back.
  void Retire() {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
    retired_ = true;
    StopLocked();
  }

  void StopLocked() {
    if (!server_) return;
    pool_->CloseStreams();
    server_->Shutdown(GrpcDeadlineAfter(std::chrono::milliseconds(500)));
    server_.reset();
    service_.reset();
    registration_.reset();
    // Remove the socket only if it is still the one we created.
    if (inode_ != 0 && SocketInode(socket_) == inode_) ::unlink(socket_.c_str());
    inode_ = 0;
    std::lock_guard<std::mutex> lock(mu_);
    status_.registered = false;
  }

  bool running() const {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
    return server_ != nullptr;
  }
  bool SocketIntact() const {
    std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
    return inode_ != 0 && SocketInode(socket_) == inode_;
  }

  // The classic path: Register on kubelet.sock, endpoint relative to its dir.
  absl::Status Register(const std::string& kubelet_socket, uint64_t kubelet_inode) {
    grpc::ChannelArguments args;
    // The kubelet creates kubelet.sock before it listens: reconnect quickly
    // instead of gRPC's default 1 s backoff.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
    auto channel = grpc::CreateCustomChannel("unix:" + kubelet_socket,
                                             grpc::InsecureChannelCredentials(), args);
    auto stub = v1beta1::Registration::NewStub(channel);
    v1beta1::RegisterRequest req;
    req.set_version("v1beta1");
    req.set_endpoint(Basename(socket_));
    req.set_resource_name(pool_->resource());
    req.mutable_options()->set_get_preferred_allocation_available(true);
    v1beta1::Empty resp;
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(GrpcDeadlineAfter(kRegisterTimeout));
    grpc::Status s = stub->Register(&ctx, req, &resp);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      status_.registered = false;
      status_.last_error = s.error_message();
      return absl::UnavailableError(absl::StrCat(pool_->resource(), ": Register on ",
                                                 kubelet_socket, " failed: ", s.error_message()));
    }
    status_.registered = true;
    status_.last_error.clear();
    status_.registrations++;
    status_.last_registered = absl::Now();
    registered_kubelet_inode_ = kubelet_inode;
    return absl::OkStatus();
  }

  bool NeedsRegister(uint64_t kubelet_inode) const {
    std::lock_guard<std::mutex> lock(mu_);
    return !status_.registered || registered_kubelet_inode_ != kubelet_inode;
  }
  void MarkUnregistered(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    status_.registered = false;
    status_.last_error = why;
  }
  RegistrationStatus status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  RegistrationMode mode() const { return mode_; }
  const std::string& socket() const { return socket_; }

 private:
  std::shared_ptr<PoolState> pool_;
  const std::string socket_;
  const RegistrationMode mode_;
  const DevicePluginService::AllocateCheck check_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<WatcherRegistrationService> registration_;
  std::unique_ptr<grpc::Server> server_;
  uint64_t inode_ = 0;
  mutable std::mutex lifecycle_mu_;  // Start/Stop from the watch thread vs. RemovePool
  bool retired_ = false;
  mutable std::mutex mu_;
  RegistrationStatus status_ ABSL_GUARDED_BY(mu_);
  uint64_t registered_kubelet_inode_ ABSL_GUARDED_BY(mu_) = 0;
};

PluginManager::PluginManager(HostPaths paths, RegistrationMode mode)
    : paths_(std::move(paths)), requested_mode_(mode) {}

PluginManager::~PluginManager() { Stop(); }

RegistrationMode PluginManager::EffectiveMode() const {
  if (requested_mode_ != RegistrationMode::kAuto) return requested_mode_;
  // The classic path works on every kubelet; use the watcher only where the
  // kubelet has no kubelet.sock but does watch plugins_registry.
  if (SocketInode(paths_.DevicePluginDir() + "/" + kKubeletSocket) != 0) {
    return RegistrationMode::kKubelet;
  }
  if (IsDirectory(paths_.PluginsRegistryDir())) return RegistrationMode::kWatcher;
  return RegistrationMode::kKubelet;
}

std::string PluginManager::SocketPathFor(const PoolState& pool, RegistrationMode mode) const {
  PoolConfig name_only;
  name_only.name = pool.resource();
  const std::string dir =
      mode == RegistrationMode::kWatcher ? paths_.PluginsRegistryDir() : paths_.DevicePluginDir();
  return dir + "/" + name_only.SocketName();
}

absl::Status PluginManager::AddPool(std::shared_ptr<PoolState> pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.count(pool->resource())) {
      return absl::AlreadyExistsError(absl::StrCat("pool ", pool->resource(), " already served"));
    }
    pools_[pool->resource()] = pool;
    if (!started_) return absl::OkStatus();
    servers_[pool->resource()] =
        std::make_shared<PoolServer>(pool, SocketPathFor(*pool, mode_), mode_, allocate_check_);
  }
  // Only the watch thread starts and registers servers once running: two
  // threads reconciling the same server would serve and register it twice.
  Wake();
  return absl::OkStatus();
}

void PluginManager::RemovePool(const std::string& resource) {
  std::shared_ptr<PoolServer> server;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pools_.erase(resource);
    auto it = servers_.find(resource);
    if (it == servers_.end()) return;
    server = it->second;
    servers_.erase(it);
  }
  server->Retire();
  LogInfo(Component::kPlugin, "{}: no longer served", resource);
}

absl::Status PluginManager::Start() {
  const RegistrationMode mode = EffectiveMode();
  // Said before MkdirAll below, so "found" means the kubelet made it.
  LogInfo(Component::kRegistration, "{}", DescribeKubeletPaths(paths_, requested_mode_, mode));
  const std::string dir =
      mode == RegistrationMode::kWatcher ? paths_.PluginsRegistryDir() : paths_.DevicePluginDir();
  if (absl::Status s = MkdirAll(dir, 0750); !s.ok()) return s;
  std::vector<std::shared_ptr<PoolServer>> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return absl::FailedPreconditionError("plugin manager already started");
    mode_ = mode;
    for (auto& [name, pool] : pools_) {
      auto server =
          std::make_shared<PoolServer>(pool, SocketPathFor(*pool, mode_), mode_, allocate_check_);
      servers_[name] = server;
      servers.push_back(server);
    }
    started_ = true;
  }
  // Serve first, then register: the kubelet dials back inside Register.
  for (auto& server : servers) {
    if (absl::Status s = server->Start(); !s.ok()) return s;
  }
  inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return ErrnoError(errno, "inotify_init1", "");
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoError(errno, "eventfd", "");
  AddWatches();
  Reconcile();
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void PluginManager::AddWatches() {
  const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF;
  // Watching both directories is cheap; a missing one is re-tried by the safety net.
  for (const std::string& dir : {paths_.DevicePluginDir(), paths_.PluginsRegistryDir()}) {
    if (IsDirectory(dir)) ::inotify_add_watch(inotify_fd_, dir.c_str(), mask);
  }
}

void PluginManager::Wake() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

void PluginManager::Run() {
  while (true) {
    bool retry = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) break;
      for (auto& [name, server] : servers_) retry = retry || !server->status().registered;
    }
    struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int n = ::poll(fds, 2, retry ? kRetryMs : kSafetyNetMs);
    if (n < 0 && errno != EINTR) {
      LogError(Component::kRegistration, "poll: {}", std::strerror(errno));
      break;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) break;
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      alignas(struct inotify_event) char buf[4096];
      bool rewatch = false;
      while (true) {
        ssize_t len = ::read(inotify_fd_, buf, sizeof(buf));
        if (len <= 0) break;
        for (char* p = buf; p < buf + len;) {
          auto* ev = reinterpret_cast<struct inotify_event*>(p);
          if (ev->mask & (IN_DELETE_SELF | IN_IGNORED)) rewatch = true;
          p += sizeof(struct inotify_event) + ev->len;
        }
      }
      if (rewatch) AddWatches();
    }
    if (n > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof(v));
    }
    Reconcile();
  }
}

void PluginManager::Reconcile() {
  std::vector<std::shared_ptr<PoolServer>> servers;
  RegistrationMode mode;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, server] : servers_) servers.push_back(server);
    mode = mode_;
  }
  const std::string kubelet_socket = paths_.DevicePluginDir() + "/" + kKubeletSocket;
  const uint64_t kubelet_inode = SocketInode(kubelet_socket);
  if (kubelet_inode != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_kubelet_inode_ != 0 && last_kubelet_inode_ != kubelet_inode) {
      kubelet_restarts_++;
      LogInfo(Component::kRegistration, "kubelet restart detected ({} re-created)", kubelet_socket);
    }
    last_kubelet_inode_ = kubelet_inode;
  }
  for (auto& server : servers) {
    if (!server->running() || !server->SocketIntact()) {
      if (server->running()) {
        LogInfo(Component::kRegistration, "{} was removed; restarting its server",
                server->socket());
      }
      if (absl::Status s = server->Start(); !s.ok()) {
        server->MarkUnregistered(std::string(s.message()));
        LogError(Component::kPlugin, "{}", s.message());
        continue;
      }
    }
    if (mode != RegistrationMode::kKubelet) continue;  // the watcher dials us
    if (kubelet_inode == 0) {
      server->MarkUnregistered("kubelet.sock is absent: waiting for the kubelet");
      continue;
    }
    if (!server->NeedsRegister(kubelet_inode)) continue;
    if (absl::Status s = server->Register(kubelet_socket, kubelet_inode); s.ok()) {
      LogInfo(Component::kRegistration, "{}: registered with the kubelet",
              server->status().resource);
    } else {
      LogWarn(Component::kRegistration, "{} (will retry)", s.message());
    }
  }
}

void PluginManager::Stop() {
  std::map<std::string, std::shared_ptr<PoolServer>> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
    started_ = false;
    servers.swap(servers_);
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  for (auto& [name, server] : servers) server->Stop();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  inotify_fd_ = wake_fd_ = -1;
}

std::vector<RegistrationStatus> PluginManager::Status() const {
  std::vector<std::shared_ptr<PoolServer>> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, server] : servers_) servers.push_back(server);
  }
  std::vector<RegistrationStatus> out;
  for (auto& s : servers) out.push_back(s->status());
  return out;
}

uint64_t PluginManager::kubelet_restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kubelet_restarts_;
}

bool PluginManager::AllRegistered() const {
  for (const RegistrationStatus& s : Status()) {
    if (!s.registered) return false;
  }
  return true;
}

}  // namespace fabric
