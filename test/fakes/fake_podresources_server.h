// A fake kubelet PodResources v1 server for tests, faithful to the kubelet's
// observable behaviour (pkg/kubelet/apis/podresources/server_v1.go):
//  - one ContainerDevices entry per (device ID, NUMA node); a device without
//    NUMA nodes appears once without topology;
//  - no Pod UID anywhere;
//  - a token bucket (100 QPS, burst 10) over every method, excess answered
//    with RESOURCE_EXHAUSTED "rejected by rate limit";
//  - Get answers "PodResources API Get method disabled" unless EnableGet(true),
//    and "pod %s in namespace %s not found" for an unknown Pod (code Unknown).
#ifndef FABRIC_TEST_FAKES_FAKE_PODRESOURCES_SERVER_H_
#define FABRIC_TEST_FAKES_FAKE_PODRESOURCES_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace grpc {
class Server;
}

namespace fabric::podresources {

struct FakeDevice {
  std::string resource;
  std::string device_id;
  std::vector<int64_t> numa_nodes;  // empty: no topology
};

struct FakeContainer {
  std::string name;
  std::vector<FakeDevice> devices;
};

struct FakePod {
  std::string ns;
  std::string name;
  std::vector<FakeContainer> containers;
};

class FakePodResourcesServer {
 public:
  FakePodResourcesServer();
  ~FakePodResourcesServer();

  void SetPods(std::vector<FakePod> pods);
  void EnableGet(bool enabled);
  // Defaults to the kubelet's 100 QPS, burst 10.
  void SetRateLimit(double qps, int burst);

  // Serves on unix socket `socket_path` (removed first if present).
  absl::Status Start(const std::string& socket_path);
  void Stop();

  int list_calls() const { return list_calls_.load(); }
  int get_calls() const { return get_calls_.load(); }
  int rejected_calls() const { return rejected_calls_.load(); }

  class Impl;  // the gRPC service; public only for the .cc

 private:
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<int> list_calls_{0};
  std::atomic<int> get_calls_{0};
  std::atomic<int> rejected_calls_{0};
};

}  // namespace fabric::podresources

#endif  // FABRIC_TEST_FAKES_FAKE_PODRESOURCES_SERVER_H_
