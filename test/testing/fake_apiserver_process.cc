#include "test/testing/fake_apiserver_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/http/client.h"

extern char** environ;

namespace fabric::testing {
namespace {

using json = nlohmann::json;

bool OnPath(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (access((dir + "/" + exe).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

bool FakeApiServerAvailable() { return OnPath("python3") && OnPath("openssl"); }

bool MakeCertificate(const std::string& dir, const std::string& name) {
  const std::string cmd = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=fake-apiserver -addext "
      "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout ",
      dir, "/", name, ".key -out ", dir, "/", name, ".crt >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0;
}

std::string FakeApiServer::url() const { return absl::StrCat("https://127.0.0.1:", port_); }

bool FakeApiServer::Start(int port) {
  const std::string port_file = dir_ + "/port";
  unlink(port_file.c_str());
  std::vector<std::string> args = {"python3",
                                   FABRIC_FAKE_APISERVER,
                                   "--port",
                                   std::to_string(port),
                                   "--port-file",
                                   port_file,
                                   "--cert",
                                   dir_ + "/server.crt",
                                   "--key",
                                   dir_ + "/server.key",
                                   "--tokens",
                                   dir_ + "/tokens.json",
                                   "--bookmark-interval",
                                   "0.2"};
  args.insert(args.end(), extra_.begin(), extra_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawnp(&pid_, "python3", nullptr, nullptr, argv.data(), environ) != 0) return false;
  for (int i = 0; i < 600; ++i) {
    std::ifstream f(port_file);
    if (f >> port_) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void FakeApiServer::Kill(int sig) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  int st;
  for (int i = 0; i < 100 && waitpid(pid_, &st, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (waitpid(pid_, &st, WNOHANG) == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &st, 0);
  }
  pid_ = -1;
}

std::pair<long, json> FakeApiServer::ControlRaw(const std::string& method, const std::string& path,
                                                const std::string& payload) {
  HttpClientOptions o;
  o.base_url = url();
  o.ca_file = dir_ + "/server.crt";
  o.max_idle_connections = 0;
  auto client = HttpClient::Create(o);
  if (!client.ok()) return {0, json()};
  HttpClientRequest r;
  r.method = method;
  r.target = path;
  r.timeout = absl::Seconds(20);
  if (!payload.empty()) r.body = &payload;
  auto answer = (*client)->Send(r);
  if (!answer.ok()) return {0, json()};
  return {answer->status, json::parse(answer->body, nullptr, false)};
}

std::vector<json> FakeApiServer::Log() {
  auto [code, body] = Control("GET", "/fake/log");
  std::vector<json> out;
  if (code == 200) {
    for (auto& r : body["requests"]) out.push_back(r);
  }
  return out;
}

}  // namespace fabric::testing
