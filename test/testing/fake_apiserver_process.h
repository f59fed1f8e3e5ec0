// tools/fake-apiserver as a child process for C++ tests: python3 over HTTPS
// with a certificate made by openssl (MakeCertificate), a token file, and
// its control API (/fake/...). Tests skip when Available() is false.
#ifndef FABRIC_TEST_TESTING_FAKE_APISERVER_PROCESS_H_
#define FABRIC_TEST_TESTING_FAKE_APISERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace fabric::testing {

// python3 and openssl are on PATH.
bool FakeApiServerAvailable();
// <dir>/<name>.crt and .key, self-signed for 127.0.0.1 and localhost.
bool MakeCertificate(const std::string& dir, const std::string& name);

// One python3 fake-apiserver process, serving <dir>/server.crt|key and
// <dir>/tokens.json (the test writes them).
class FakeApiServer {
 public:
  FakeApiServer(const std::string& dir, std::vector<std::string> extra)
      : dir_(dir), extra_(std::move(extra)) {}
  ~FakeApiServer() { Kill(15); }

  // Starts it (on `port`, 0 = any) and waits for its port file.
  bool Start(int port = 0);
  void Kill(int sig);
  int port() const { return port_; }
  std::string url() const;

  // The control API (no auth): method, path -> (code, body).
  std::pair<long, nlohmann::json> Control(const std::string& method, const std::string& path,
                                          const nlohmann::json& body = nullptr) {
    return ControlRaw(method, path, body.is_null() ? "" : body.dump());
  }
  std::pair<long, nlohmann::json> ControlRaw(const std::string& method, const std::string& path,
                                             const std::string& payload);
  std::vector<nlohmann::json> Log();

 private:
  std::string dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace fabric::testing

#endif  // FABRIC_TEST_TESTING_FAKE_APISERVER_PROCESS_H_
