#include "test/fakes/fake_podresources_server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/podresources/token_bucket.h"
#include "podresources/v1/api.grpc.pb.h"

namespace fabric::podresources {

class FakePodResourcesServer::Impl final : public v1::PodResourcesLister::Service {
 public:
  explicit Impl(FakePodResourcesServer* owner) : owner_(owner) {}

  void SetPods(std::vector<FakePod> pods) {
    std::lock_guard<std::mutex> lock(mu_);
    pods_ = std::move(pods);
  }
  void EnableGet(bool enabled) {
    std::lock_guard<std::mutex> lock(mu_);
    get_enabled_ = enabled;
  }
  void SetRateLimit(double qps, int burst) {
    std::lock_guard<std::mutex> lock(mu_);
    limiter_ = std::make_unique<TokenBucket>(qps, burst);
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    owner_->list_calls_++;
    if (!Admit()) return RateLimited();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& pod : pods_) Fill(pod, resp->add_pod_resources());
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* req,
                   v1::GetPodResourcesResponse* resp) override {
    owner_->get_calls_++;
    if (!Admit()) return RateLimited();
    std::lock_guard<std::mutex> lock(mu_);
    if (!get_enabled_) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "PodResources API Get method disabled");
    }
    for (const auto& pod : pods_) {
      if (pod.ns == req->pod_namespace() && pod.name == req->pod_name()) {
        Fill(pod, resp->mutable_pod_resources());
        return grpc::Status::OK;
      }
    }
    return grpc::Status(
        grpc::StatusCode::UNKNOWN,
        absl::StrFormat("pod %s in namespace %s not found", req->pod_name(), req->pod_namespace()));
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* resp) override {
    if (!Admit()) return RateLimited();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& pod : pods_) {
      for (const auto& c : pod.containers) AddDevices(c.devices, resp->mutable_devices());
    }
    return grpc::Status::OK;
  }

 private:
  bool Admit() {
    std::lock_guard<std::mutex> lock(mu_);
    if (limiter_->TryAcquire()) return true;
    owner_->rejected_calls_++;
    return false;
  }
  static grpc::Status RateLimited() {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "rejected by rate limit");
  }

  // One entry per (device, NUMA node), as the kubelet's
  // containerDevicesFromResourceDeviceInstances.
  static void AddDevices(const std::vector<FakeDevice>& devices,
                         google::protobuf::RepeatedPtrField<v1::ContainerDevices>* out) {
    for (const auto& d : devices) {
      if (d.numa_nodes.empty()) {
        auto* cd = out->Add();
        cd->set_resource_name(d.resource);
        cd->add_device_ids(d.device_id);
        continue;
      }
      for (int64_t node : d.numa_nodes) {
        auto* cd = out->Add();
        cd->set_resource_name(d.resource);
        cd->add_device_ids(d.device_id);
        cd->mutable_topology()->add_nodes()->set_id(node);
      }
    }
  }

  static void Fill(const FakePod& pod, v1::PodResources* out) {
    out->set_name(pod.name);
    out->set_namespace_(pod.ns);
    for (const auto& c : pod.containers) {
      auto* cr = out->add_containers();
      cr->set_name(c.name);
      AddDevices(c.devices, cr->mutable_devices());
    }
  }

  FakePodResourcesServer* owner_;
  std::mutex mu_;
  std::vector<FakePod> pods_;
  bool get_enabled_ = false;
  std::unique_ptr<TokenBucket> limiter_ = std::make_unique<TokenBucket>(100, 10);
};

FakePodResourcesServer::FakePodResourcesServer() : impl_(std::make_unique<Impl>(this)) {}

FakePodResourcesServer::~FakePodResourcesServer() { Stop(); }

void FakePodResourcesServer::SetPods(std::vector<FakePod> pods) { impl_->SetPods(std::move(pods)); }
void FakePodResourcesServer::EnableGet(bool enabled) { impl_->EnableGet(enabled); }
void FakePodResourcesServer::SetRateLimit(double qps, int burst) {
  impl_->SetRateLimit(qps, burst);
}

absl::Status FakePodResourcesServer::Start(const std::string& socket_path) {
  ::unlink(socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
  builder.RegisterService(impl_.get());
  server_ = builder.BuildAndStart();
  if (!server_) return absl::InternalError(absl::StrCat("cannot serve on unix:", socket_path));
  return absl::OkStatus();
}

void FakePodResourcesServer::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }
}

}  // namespace fabric::podresources
