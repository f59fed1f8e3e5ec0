#include "plugin/dra/dra_plugin_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"

namespace fabric::dra {
namespace {

// Strings we send must be valid UTF-8: the kubelet (Go) refuses to unmarshal
// a proto3 string that is not, and the whole call would fail.
std::string Safe(absl::string_view s) { return SanitizeUtf8(s); }

std::string ClaimName(const drav1::Claim& c) {
  return absl::StrCat(EscapeBytes(c.namespace_()), "/", EscapeBytes(c.name()), " (UID ",
                      EscapeBytes(c.uid()), ")");
}

template <typename From, typename To>
void CopyClaims(const From& in, To* out) {
  for (const auto& c : in.claims()) {
    auto* d = out->add_claims();
    d->set_namespace_(c.namespace_());
    d->set_uid(c.uid());
    d->set_name(c.name());
  }
}

template <typename From, typename To>
void CopyPrepareResponse(const From& in, To* out) {
  for (const auto& [uid, r] : in.claims()) {
    auto& o = (*out->mutable_claims())[uid];
    o.set_error(r.error());
    for (const auto& d : r.devices()) {
      auto* od = o.add_devices();
      *od->mutable_request_names() = d.request_names();
      od->set_pool_name(d.pool_name());
      od->set_device_name(d.device_name());
      *od->mutable_cdi_device_ids() = d.cdi_device_ids();
    }
  }
}

template <typename From, typename To>
void CopyUnprepareResponse(const From& in, To* out) {
  for (const auto& [uid, r] : in.claims()) (*out->mutable_claims())[uid].set_error(r.error());
}

}  // namespace

drav1::NodePrepareResourcesRequest ToV1(const drav1beta1::NodePrepareResourcesRequest& in) {
  drav1::NodePrepareResourcesRequest out;
  CopyClaims(in, &out);
  return out;
}
drav1::NodeUnprepareResourcesRequest ToV1(const drav1beta1::NodeUnprepareResourcesRequest& in) {
  drav1::NodeUnprepareResourcesRequest out;
  CopyClaims(in, &out);
  return out;
}
drav1beta1::NodePrepareResourcesRequest ToV1beta1(const drav1::NodePrepareResourcesRequest& in) {
  drav1beta1::NodePrepareResourcesRequest out;
  CopyClaims(in, &out);
  return out;
}
drav1beta1::NodeUnprepareResourcesRequest ToV1beta1(
    const drav1::NodeUnprepareResourcesRequest& in) {
  drav1beta1::NodeUnprepareResourcesRequest out;
  CopyClaims(in, &out);
  return out;
}
drav1beta1::NodePrepareResourcesResponse ToV1beta1(const drav1::NodePrepareResourcesResponse& in) {
  drav1beta1::NodePrepareResourcesResponse out;
  CopyPrepareResponse(in, &out);
  return out;
}
drav1::NodePrepareResourcesResponse ToV1(const drav1beta1::NodePrepareResourcesResponse& in) {
  drav1::NodePrepareResourcesResponse out;
  CopyPrepareResponse(in, &out);
  return out;
}
drav1beta1::NodeUnprepareResourcesResponse ToV1beta1(
    const drav1::NodeUnprepareResourcesResponse& in) {
  drav1beta1::NodeUnprepareResourcesResponse out;
  CopyUnprepareResponse(in, &out);
  return out;
}
drav1::NodeUnprepareResourcesResponse ToV1(const drav1beta1::NodeUnprepareResourcesResponse& in) {
  drav1::NodeUnprepareResourcesResponse out;
  CopyUnprepareResponse(in, &out);
  return out;
}

// The synchronous gRPC API: a prepare may wait on the API server, and the
// sync server gives each call its own thread instead of blocking gRPC's
// callback threads.
class DraPluginService::V1Adapter final : public drav1::DRAPlugin::Service {
 public:
  explicit V1Adapter(DraPluginService* core) : core_(core) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const drav1::NodePrepareResourcesRequest* request,
                                    drav1::NodePrepareResourcesResponse* response) override {
    *response = core_->Prepare(*request);
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const drav1::NodeUnprepareResourcesRequest* request,
                                      drav1::NodeUnprepareResourcesResponse* response) override {
    *response = core_->Unprepare(*request);
    return grpc::Status::OK;
  }

 private:
  DraPluginService* const core_;
};

class DraPluginService::V1beta1Adapter final : public drav1beta1::DRAPlugin::Service {
 public:
  explicit V1beta1Adapter(DraPluginService* core) : core_(core) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const drav1beta1::NodePrepareResourcesRequest* request,
                                    drav1beta1::NodePrepareResourcesResponse* response) override {
    *response = ToV1beta1(core_->Prepare(ToV1(*request)));
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext*, const drav1beta1::NodeUnprepareResourcesRequest* request,
      drav1beta1::NodeUnprepareResourcesResponse* response) override {
    *response = ToV1beta1(core_->Unprepare(ToV1(*request)));
    return grpc::Status::OK;
  }

 private:
  DraPluginService* const core_;
};

class DraPluginService::ClaimLock {
 public:
  ClaimLock(DraPluginService* s, std::string uid) : s_(s), uid_(std::move(uid)) {
    std::unique_lock<std::mutex> lock(s_->mu_);
    s_->claim_released_.wait(
        lock, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return s_->busy_claims_.count(uid_) == 0; });
    s_->busy_claims_.insert(uid_);
  }
  ~ClaimLock() {
    {
      std::lock_guard<std::mutex> lock(s_->mu_);
      s_->busy_claims_.erase(uid_);
    }
    s_->claim_released_.notify_all();
  }

 private:
  DraPluginService* const s_;
  const std::string uid_;
};

DraPluginService::DraPluginService(DraPluginOptions options, ClaimAllocations* allocations,
                                   DevicePreparer* preparer)
    : options_(std::move(options)),
      allocations_(allocations),
      preparer_(preparer),
      v1_(std::make_unique<V1Adapter>(this)),
      v1beta1_(std::make_unique<V1beta1Adapter>(this)),
      checkpoint_(options_.state_dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = checkpoint_.Load(); !s.ok()) {
    load_error_ = std::string(s.message());
    LogError(Component::kPlugin,
             "DRA: cannot load the prepared-claims checkpoint: {}; starting with no prepared "
             "claims (the kubelet's next prepare of each claim prepares it again)",
             s.message());
  } else {
    LogInfo(Component::kPlugin, "DRA: {} prepared claim(s) from {}", checkpoint_.size(),
            checkpoint_.path());
  }
}

DraPluginService::~DraPluginService() = default;

grpc::Service* DraPluginService::v1_service() { return v1_.get(); }
grpc::Service* DraPluginService::v1beta1_service() { return v1beta1_.get(); }

drav1::NodePrepareResourcesResponse DraPluginService::Prepare(
    const drav1::NodePrepareResourcesRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  prepare_calls_.fetch_add(1, std::memory_order_relaxed);
  drav1::NodePrepareResourcesResponse response;
  for (const drav1::Claim& claim : request.claims()) {
    // A UID twice in one request is prepared once; the map has one entry.
    if (response.claims().count(claim.uid())) continue;
    drav1::NodePrepareResourceResponse one = PrepareOne(claim);
    if (!one.error().empty()) {
      prepare_errors_.fetch_add(1, std::memory_order_relaxed);
      LogWarn(Component::kPlugin, "DRA: prepare {}: {}", ClaimName(claim), one.error());
    }
    (*response.mutable_claims())[claim.uid()] = std::move(one);
  }
  prepare_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return response;
}

drav1::NodePrepareResourceResponse DraPluginService::PrepareOne(const drav1::Claim& claim) {
  drav1::NodePrepareResourceResponse out;
  auto fill = [&out](const PreparedClaim& prepared) {
    for (const PreparedDevice& d : prepared.devices) {
      auto* dev = out.add_devices();
      for (const auto& r : d.request_names) dev->add_request_names(Safe(r));
      dev->set_pool_name(Safe(d.pool));
      dev->set_device_name(Safe(d.device));
      for (const auto& id : d.cdi_device_ids) dev->add_cdi_device_ids(Safe(id));
    }
  };
  if (claim.uid().empty() || claim.namespace_().empty() || claim.name().empty()) {
    out.set_error(Safe(absl::StrCat("claim ", ClaimName(claim),
                                    ": the kubelet must name its namespace, name and UID")));
    return out;
  }
  ClaimLock claim_lock(this, claim.uid());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const PreparedClaim* prepared = checkpoint_.Find(claim.uid())) {
      fill(*prepared);  // idempotent: the recorded answer, no new preparation
      return out;
    }
  }
  absl::StatusOr<ClaimAllocation> allocation =
      allocations_->Get(claim.namespace_(), claim.name(), claim.uid());
  if (!allocation.ok()) {
    out.set_error(Safe(absl::StrCat("cannot read the allocation of ResourceClaim ",
                                    ClaimName(claim), ": ", allocation.status().message())));
    return out;
  }
  // One device can serve several requests of the claim (adminAccess, or a
  // request and its subrequest): one Device entry with every request name.
  PreparedClaim prepared;
  prepared.claim_namespace = claim.namespace_();
  prepared.name = claim.name();
  std::vector<std::string> device_names;
  for (const AllocationResult& r : allocation->results) {
    PreparedDevice* device = nullptr;
    for (PreparedDevice& d : prepared.devices) {
      if (d.device == r.device && d.pool == r.pool) device = &d;
    }
    if (device == nullptr) {
      device = &prepared.devices.emplace_back();
      device->pool = r.pool;
      device->device = r.device;
      device_names.push_back(r.device);
    }
    device->request_names.push_back(r.request);
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> ids =
      preparer_->Prepare(claim.uid(), device_names);
  if (!ids.ok()) {
    out.set_error(
        Safe(absl::StrCat("cannot prepare devices [", absl::StrJoin(device_names, ", "),
                          "] of ResourceClaim ", ClaimName(claim), ": ", ids.status().message())));
    return out;
  }
  if (ids->size() != device_names.size()) {
    out.set_error(
        Safe(absl::StrCat("internal error: ", ids->size(), " CDI device ids for ",
                          device_names.size(), " devices of ResourceClaim ", ClaimName(claim))));
    return out;
  }
  for (size_t i = 0; i < ids->size(); ++i) prepared.devices[i].cdi_device_ids = (*ids)[i];
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Checkpointed before the answer: an agent restarted after this answers
    // the same; one that died before it prepares again (Prepare is idempotent).
    if (absl::Status s = checkpoint_.Put(claim.uid(), prepared); !s.ok()) {
      out.set_error(Safe(
          absl::StrCat("cannot checkpoint ResourceClaim ", ClaimName(claim), ": ", s.message())));
      return out;
    }
  }
  LogInfo(Component::kPlugin, "DRA: prepared {}: [{}]", ClaimName(claim),
          absl::StrJoin(device_names, ", "));
  fill(prepared);
  return out;
}

drav1::NodeUnprepareResourcesResponse DraPluginService::Unprepare(
    const drav1::NodeUnprepareResourcesRequest& request) {
  unprepare_calls_.fetch_add(1, std::memory_order_relaxed);
  drav1::NodeUnprepareResourcesResponse response;
  for (const drav1::Claim& claim : request.claims()) {
    if (response.claims().count(claim.uid())) continue;
    std::string error = UnprepareOne(claim);
    if (!error.empty()) {
      unprepare_errors_.fetch_add(1, std::memory_order_relaxed);
      LogWarn(Component::kPlugin, "DRA: unprepare {}: {}", ClaimName(claim), error);
    }
    (*response.mutable_claims())[claim.uid()].set_error(Safe(error));
  }
  return response;
}

std::string DraPluginService::UnprepareOne(const drav1::Claim& claim) {
  if (claim.uid().empty()) return "the kubelet sent a claim without a UID";
  ClaimLock claim_lock(this, claim.uid());
  bool known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = checkpoint_.Find(claim.uid()) != nullptr;
  }
  // Asked even for a claim the checkpoint does not know: an agent that died
  // between preparing and checkpointing left specs behind.
  if (absl::Status s = preparer_->Unprepare(claim.uid()); !s.ok()) {
    return absl::StrCat("cannot unprepare ResourceClaim ", ClaimName(claim), ": ", s.message());
  }
  if (!known) return "";
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = checkpoint_.Remove(claim.uid()); !s.ok()) {
    return absl::StrCat("cannot checkpoint the unprepare of ResourceClaim ", ClaimName(claim), ": ",
                        s.message());
  }
  LogInfo(Component::kPlugin, "DRA: unprepared {}", ClaimName(claim));
  return "";
}

DraPluginStats DraPluginService::Stats() const {
  DraPluginStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.prepared_claims = checkpoint_.size();
  }
  s.prepare_calls = prepare_calls_.load(std::memory_order_relaxed);
  s.unprepare_calls = unprepare_calls_.load(std::memory_order_relaxed);
  s.prepare_errors = prepare_errors_.load(std::memory_order_relaxed);
  s.unprepare_errors = unprepare_errors_.load(std::memory_order_relaxed);
  s.prepare_latency = prepare_latency_.Read();
  s.checkpoint_load_error = load_error_;
  return s;
}

}  // namespace fabric::dra
