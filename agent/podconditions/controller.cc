#include "agent/podconditions/controller.h"

#include "absl/strings/str_cat.h"

namespace fabric::podconditions {
namespace {

EventRecorderOptions EventsFor(ControllerOptions o) {
  o.events.node = o.node;
  return o.events;
}

}  // namespace

PodConditionsController::PodConditionsController(std::unique_ptr<kubeapi::KubeClient> client,
                                                 ControllerOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      pods_(client_.get(), options_.node, options_.watch),
      events_(client_.get(), EventsFor(options_)),
      writer_(client_.get(), &pods_, &events_, options_.writer) {}

PodConditionsController::~PodConditionsController() { Stop(); }

void PodConditionsController::Start() {
  pods_.Start();
  thread_ = std::thread([this] { Run(); });
}

void PodConditionsController::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  pods_.Stop();
}

void PodConditionsController::Poke(std::shared_ptr<const observe::WindowResult> result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(result);
  }
  cv_.notify_one();
}

void PodConditionsController::Run() {
  while (true) {
    std::shared_ptr<const observe::WindowResult> r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || pending_ != nullptr; });
      if (stop_) return;
      r = std::move(pending_);
    }
    writer_.Tick(*r);
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = writer_.stats();
    event_writes_ = events_.writes();
    event_errors_ = events_.errors();
  }
}

std::string PodConditionsController::MetricsText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                    value, "\n");
  };
  family("fabric_pod_conditions_synced", "gauge",
         "1 once this node's Pods were listed from the API server (--pod-conditions).",
         pods_.synced() ? 1 : 0);
  family("fabric_pod_conditions_pods", "gauge",
         "Pods on this node whose fabric.gpustack.ai/ conditions the agent keeps.", stats_.pods);
  family("fabric_pod_conditions_patches_total", "counter",
         "pods/status patches written (only when a condition's value changed).", stats_.patches);
  family("fabric_pod_conditions_patch_errors_total", "counter",
         "pods/status patches that failed or were refused.", stats_.patch_errors);
  family("fabric_pod_events_writes_total", "counter",
         "Events created or their series updated (events.k8s.io/v1).", event_writes_);
  family("fabric_pod_events_errors_total", "counter", "Event writes that failed.", event_errors_);
  return out;
}

}  // namespace fabric::podconditions
