// --pod-conditions: the Pod watch of this node, the condition writer and the
// event recorder on their own thread, fed the observer's newest window after
// every sample (Poke). The sampler and the device-plugin path never wait for
// the API server: a Poke only swaps a pointer and wakes the thread, and a
// window that arrives while a tick runs replaces the one waiting.
#ifndef FABRIC_AGENT_PODCONDITIONS_CONTROLLER_H_
#define FABRIC_AGENT_PODCONDITIONS_CONTROLLER_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/kubeapi/kube_client.h"
#include "agent/observe/transport.h"
#include "agent/podconditions/event_recorder.h"
#include "agent/podconditions/node_pods.h"
#include "agent/podconditions/writer.h"

namespace fabric::podconditions {

struct ControllerOptions {
  std::string node;
  WriterOptions writer;
  EventRecorderOptions events;  // node is set from `node`
  kubeapi::WatchOptions watch;
};

class PodConditionsController {
 public:
  PodConditionsController(std::unique_ptr<kubeapi::KubeClient> client, ControllerOptions options);
  ~PodConditionsController();

  void Start();
  void Stop();
  // The newest window (from the sampler's hook; cheap, never blocks on I/O).
  void Poke(std::shared_ptr<const observe::WindowResult> result);

  // fabric_pod_conditions_* and fabric_pod_events_* (Prometheus text).
  std::string MetricsText() const;

 private:
  void Run();

  std::unique_ptr<kubeapi::KubeClient> client_;
  const ControllerOptions options_;
  NodePods pods_;
  EventRecorder events_;
  ConditionWriter writer_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::shared_ptr<const observe::WindowResult> pending_;
  WriterStats stats_;  // a copy after each tick, for MetricsText
  uint64_t event_writes_ = 0, event_errors_ = 0;
};

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_CONTROLLER_H_
