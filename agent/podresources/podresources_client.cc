#include "agent/podresources/podresources_client.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/base/grpc_status.h"
#include "agent/base/logging.h"

namespace fabric::podresources {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  return FromGrpcStatus(s, absl::StrCat("PodResources ", what));
}

// The kubelet reports Get errors as plain (code Unknown) errors; the text is
// the only signal (pkg/kubelet/apis/podresources/server_v1.go).
bool IsGetDisabled(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
         absl::StrContains(s.error_message(), "Get method disabled");
}
bool IsPodNotFound(const grpc::Status& s) {
  return absl::StrContains(s.error_message(), "not found");
}

}  // namespace

std::vector<PodDevices> MergePodResources(const v1::PodResources& pod) {
  std::vector<PodDevices> out;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const auto& c : pod.containers()) {
    for (const auto& d : c.devices()) {
      auto key = std::make_pair(c.name(), d.resource_name());
      auto [it, inserted] = index.emplace(key, out.size());
      if (inserted) {
        out.push_back(
            PodDevices{pod.namespace_(), pod.name(), c.name(), d.resource_name(), {}, {}});
      }
      auto& ids = out[it->second].device_ids;
      for (const auto& id : d.device_ids()) {
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
    }
  }
  return out;
}

PodResourcesClient::PodResourcesClient(PodResourcesClientOptions options)
    : options_(std::move(options)), limiter_(options_.qps, options_.burst) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_receive_bytes);
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", options_.socket_path),
                                       grpc::InsecureChannelCredentials(), args);
  stub_ = v1::PodResourcesLister::NewStub(channel_);
  if (!options_.use_get) get_disabled_ = true;
}

PodResourcesClient::~PodResourcesClient() = default;

absl::Status PodResourcesClient::Pace() {
  if (limiter_.Acquire(options_.max_wait_for_token)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      "PodResources: client-side rate limit reached; too many lookups, retry later");
}

absl::StatusOr<std::vector<PodDevices>> PodResourcesClient::GetPodDevices(const std::string& ns,
                                                                          const std::string& pod) {
  if (!get_disabled_) {
    v1::GetPodResourcesRequest req;
    req.set_pod_name(pod);
    req.set_pod_namespace(ns);
    grpc::Status s;
    for (int attempt = 0; attempt <= options_.retries_on_rate_limit; ++attempt) {
      auto paced = Pace();
      if (!paced.ok()) return paced;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
      v1::GetPodResourcesResponse resp;
      s = stub_->Get(&ctx, req, &resp);
      if (s.ok()) return MergePodResources(resp.pod_resources());
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20 << attempt));
    }
    if (IsGetDisabled(s)) {
      LogInfo(Component::kPodResources,
              "kubelet PodResources Get is disabled ({}); using List from now on",
              s.error_message());
      get_disabled_ = true;
    } else if (IsPodNotFound(s)) {
      return absl::NotFoundError(absl::StrCat("PodResources: ", s.error_message()));
    } else {
      return FromGrpc(s, "Get");
    }
  }
  auto all = ListPodDevices();
  if (!all.ok()) return all.status();
  std::vector<PodDevices> out;
  for (auto& d : *all) {
    if (d.ns == ns && d.pod == pod) out.push_back(std::move(d));
  }
  // A Pod absent from List (or listed without devices) has no devices for
  // us; callers treat that the same as Get's "not found".
  return out;
}

absl::StatusOr<std::vector<PodDevices>> PodResourcesClient::ListPodDevices() {
  grpc::Status s;
  for (int attempt = 0; attempt <= options_.retries_on_rate_limit; ++attempt) {
    auto paced = Pace();
    if (!paced.ok()) return paced;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    s = stub_->List(&ctx, req, &resp);
    if (s.ok()) {
      std::vector<PodDevices> out;
      for (const auto& pod : resp.pod_resources()) {
        auto merged = MergePodResources(pod);
        out.insert(out.end(), std::make_move_iterator(merged.begin()),
                   std::make_move_iterator(merged.end()));
      }
      return out;
    }
    if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20 << attempt));
  }
  return FromGrpc(s, "List");
}

}  // namespace fabric::podresources
