#include "test/hostile/hostile_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace fabric::hostile {

std::string AgentBinary() {
  const char* dir = std::getenv("FABRIC_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/agent/daemon/fabric-agent";
}

int EnvInt(const char* name, int def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  return std::atoi(v);
}

std::vector<std::string> AgentArgs(const std::string& node, const std::string& work,
                                   const std::string& config) {
  std::vector<std::string> args = {
      "--sysfs-root=" + node + "/sys", "--dev-root=" + node + "/dev",
      "--kubelet-root=" + work,        "--device-plugin-dir=" + work + "/device-plugins",
      "--registration=kubelet",        "--write-cdi=false",
      "--state-dir=" + work + "/state"};
  if (!config.empty()) args.insert(args.begin(), "--config=" + config);
  return args;
}

AgentProcess::AgentProcess(std::vector<std::string> args, std::string log_path)
    : args_(std::move(args)), log_path_(std::move(log_path)) {}

AgentProcess::~AgentProcess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

absl::Status AgentProcess::Start() {
  const std::string bin = AgentBinary();
  if (::access(bin.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no fabric-agent binary at ", bin));
  }
  // Everything the child needs is prepared before fork (only async-signal-safe
  // calls between fork and exec: this process runs gRPC threads).
  std::vector<std::string> argv_s = {bin};
  argv_s.insert(argv_s.end(), args_.begin(), args_.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError("cannot open " + log_path_);
  pid_ = ::fork();
  if (pid_ < 0) {
    ::close(log_fd);
    return absl::InternalError("fork failed");
  }
  if (pid_ == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    // A fresh signal mask and dispositions (gtest/gRPC may have changed ours).
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  return absl::OkStatus();
}

bool AgentProcess::Alive() {
  if (pid_ <= 0 || exited_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    status_ = status;
    return false;
  }
  return true;
}

void AgentProcess::Signal(int sig) {
  if (Alive()) ::kill(pid_, sig);
}

int AgentProcess::Stop(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  if (!exited_) {
    ::kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + timeout;
    while (Alive() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      exited_ = true;
    }
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

ProcSample AgentProcess::Sample() const {
  ProcSample s;
  s.at = absl::Now();
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::atol(line.c_str() + 6);
    if (line.rfind("Threads:", 0) == 0) s.threads = std::atoi(line.c_str() + 8);
  }
  const std::string fd_dir = "/proc/" + std::to_string(pid_) + "/fd";
  if (DIR* d = ::opendir(fd_dir.c_str())) {
    int n = 0;
    while (struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    s.fds = n;
  }
  return s;
}

std::string AgentProcess::Log() const { return Slurp(log_path_); }

int AgentProcess::CountInLog(const std::string& needle) const {
  const std::string text = Log();
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

std::map<std::string, std::string> UverbsPaths(const std::string& sysfs_root) {
  std::map<std::string, std::string> out;
  const std::string cls = sysfs_root + "/class/infiniband";
  DIR* d = ::opendir(cls.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char real[PATH_MAX];
    if (::realpath((cls + "/" + e->d_name).c_str(), real) == nullptr) continue;
    // <bdf>/infiniband/<dev> -> <bdf>/infiniband_verbs/uverbsN
    std::string bdf(real);
    for (int i = 0; i < 2; ++i) bdf = bdf.substr(0, bdf.rfind('/'));
    if (DIR* v = ::opendir((bdf + "/infiniband_verbs").c_str())) {
      while (struct dirent* u = ::readdir(v)) {
        if (std::string(u->d_name).rfind("uverbs", 0) == 0) {
          out[e->d_name] = std::string("/dev/infiniband/") + u->d_name;
        }
      }
      ::closedir(v);
    }
  }
  ::closedir(d);
  return out;
}

sim::KubeletSimOptions RealisticKubelet() {
  sim::KubeletSimOptions o;
  o.serve_podresources = true;
  return o;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

int Sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool WriteAtomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << content;
    if (!f) return false;
  }
  return ::rename(tmp.c_str(), path.c_str()) == 0;
}

bool WriteInPlace(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  return static_cast<bool>(f);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace fabric::hostile
