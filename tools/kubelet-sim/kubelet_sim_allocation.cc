// KubeletSim: pod admission (devicesToAllocate, GetPreferredAllocation, Allocate,
// PreStartContainer) and the checkpoint.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/grpc_status.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_rules.h"
#include "tools/kubelet-sim/kubelet_sim.h"
#include "tools/kubelet-sim/kubelet_sim_internal.h"

namespace fabric::sim {

using internal::SortedNatural;

// --------------------------------------------------------------- allocation

absl::StatusOr<std::shared_ptr<KubeletSim::Endpoint>> KubeletSim::CurrentEndpoint(
    const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || !it->second.endpoint) {
    return absl::NotFoundError(
        fmt::format("endpoint not found in cache for a registered resource: {}", resource));
  }
  const auto& endpoint = it->second.endpoint;
  if (it->second.stopped || endpoint->disconnected) {
    // errEndpointStopped = "endpoint %v has been stopped" (%v of the Go struct).
    return absl::FailedPreconditionError(fmt::format("endpoint &{{{} {}}} has been stopped",
                                                     endpoint->socket_path, endpoint->resource));
  }
  return endpoint;
}

absl::StatusOr<v1beta1::AllocateResponse> KubeletSim::AllocateIds(
    const std::string& resource, const std::vector<std::string>& ids) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : ids) container->add_devices_ids(id);
  v1beta1::AllocateResponse response;
  grpc::ClientContext ctx;  // the kubelet sets no deadline on Allocate.
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->Allocate(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].allocate_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return response;
}

absl::StatusOr<v1beta1::PreferredAllocationResponse> KubeletSim::Preferred(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int size) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : available) container->add_available_deviceids(id);
  for (const auto& id : must_include) container->add_must_include_deviceids(id);
  container->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext ctx;  // no deadline, as in the kubelet.
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->GetPreferredAllocation(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].preferred_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return response;
}

absl::Status KubeletSim::PreStart(const std::string& resource,
                                  const std::vector<std::string>& ids) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::PreStartContainerRequest request;
  for (const auto& id : ids) request.add_devices_ids(id);
  v1beta1::PreStartContainerResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(GrpcDeadlineAfter(options_.pre_start_timeout));
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->PreStartContainer(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].pre_start_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return absl::OkStatus();
}

absl::StatusOr<v1beta1::ContainerAllocateResponse> KubeletSim::Allocate(
    const std::string& resource, int count, const std::string& pod, const std::string& container,
    std::vector<std::string>* chosen_ids) {
  if (count <= 0) return absl::InvalidArgumentError("kubelet-sim: count must be positive");
  const AllocationKey key{pod, container, resource};
  std::vector<std::string> candidates;
  bool ask_plugin = false;
  int needed = count;
  {
    // devicesToAllocate, in its order of checks.
    std::lock_guard<std::mutex> l(mu_);
    auto existing = allocations_.find(key);
    if (existing != allocations_.end()) {
      const int have = static_cast<int>(existing->second.device_ids.size());
      needed -= have;
      if (needed != 0) {
        return absl::InvalidArgumentError(
            fmt::format("pod {} container {} changed request for resource {} from {} to {}",
                        GoQuote(pod), GoQuote(container), GoQuote(resource), have, count));
      }
    }
    auto it = resources_.find(resource);
    const bool known = it != resources_.end() && !ExpiredLocked(it->second);
    if (!known) {
      auto held = allocated_devices_.find(resource);
      if (held == allocated_devices_.end() || held->second.empty()) {
        // allocateContainerResources: !isDevicePluginResource -> skipped; the
        // container starts without devices.
        LogWarn(Component::kSim,
                "{} is not a device-plugin resource the kubelet knows: pod {} container {} is "
                "admitted WITHOUT devices",
                resource, pod, container);
        if (chosen_ids) chosen_ids->clear();
        return v1beta1::ContainerAllocateResponse();
      }
      return absl::FailedPreconditionError(
          fmt::format("cannot allocate unregistered device {}", resource));
    }
    const ResourceState& state = it->second;
    if (state.healthy.empty() && options_.version != KubeletVersion::kV1_20) {
      return absl::FailedPreconditionError(fmt::format(
          "no healthy devices present; cannot allocate unhealthy devices {}", resource));
    }
    if (existing != allocations_.end()) {
      for (const auto& id : existing->second.device_ids) {
        if (!state.healthy.count(id)) {
          return absl::FailedPreconditionError(fmt::format(
              "previously allocated devices are no longer healthy; cannot allocate unhealthy "
              "devices {}",
              resource));
        }
      }
      // Container restart: the cached response is replayed, the plugin is not called.
      if (chosen_ids) *chosen_ids = existing->second.device_ids;
      return existing->second.response;
    }
    std::set<std::string> available;
    const auto& in_use = allocated_devices_[resource];
    for (const auto& id : state.healthy) {
      if (!in_use.count(id)) available.insert(id);
    }
    if (static_cast<int>(available.size()) < needed) {
      return absl::FailedPreconditionError(fmt::format(
          "requested number of devices unavailable for {}. Requested: {}, Available: {}", resource,
          needed, available.size()));
    }
    candidates = SortedNatural(available);
    if (!state.endpoint) {
      return absl::NotFoundError(
          fmt::format("endpoint not found in cache for a registered resource: {}", resource));
    }
    ask_plugin = state.endpoint->options.get_preferred_allocation_available();
  }

  // Without a topology-manager hint every candidate is "unaligned", so the
  // kubelet asks the plugin (if it advertised GetPreferredAllocation) with all
  // candidates, must_include = devices already chosen (none), size = request.
  std::vector<std::string> chosen;
  const std::set<std::string> candidate_set(candidates.begin(), candidates.end());
  if (ask_plugin) {
    auto preferred = Preferred(resource, candidates, {}, count);
    if (!preferred.ok()) {
      return absl::Status(
          preferred.status().code(),
          fmt::format("device plugin GetPreferredAllocation rpc failed with err: {}",
                      std::string(preferred.status().message())));
    }
    if (preferred->container_responses_size() > 0) {
      for (const auto& id : preferred->container_responses(0).deviceids()) {
        if (static_cast<int>(chosen.size()) == needed) break;
        if (candidate_set.count(id) &&
            std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
          chosen.push_back(id);
        }
      }
    }
  }
  for (const auto& id : candidates) {
    if (static_cast<int>(chosen.size()) == needed) break;
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    allocated_devices_[resource].insert(chosen.begin(), chosen.end());
  }
  auto restore_allocated = [&] {
    std::lock_guard<std::mutex> l(mu_);
    auto& in_use = allocated_devices_[resource];
    for (const auto& id : chosen) in_use.erase(id);
  };

  auto response = AllocateIds(resource, chosen);
  if (!response.ok()) {
    restore_allocated();
    return response.status();
  }
  if (response->container_responses_size() == 0) {
    restore_allocated();
    // The kubelet prints the Go struct (%v); with no container responses
    // there is nothing else in it. protobuf-lite has no text format.
    return absl::InternalError("no containers return in allocation response &{[]}");
  }

  AllocationRecord record;
  record.pod = pod;
  record.container = container;
  record.resource = resource;
  record.device_ids = chosen;
  record.response = response->container_responses(0);
  std::lock_guard<std::mutex> l(mu_);
  const ResourceState& state = resources_[resource];
  for (const auto& id : chosen) {
    const v1beta1::Device* device = nullptr;
    for (const auto& d : state.devices) {
      if (d.id() == id) device = &d;
    }
    if (device == nullptr || device->topology().nodes_size() == 0) {
      record.devices_per_numa[-1].push_back(id);  // nodeWithoutTopology
      continue;
    }
    for (const auto& node : device->topology().nodes()) {
      record.devices_per_numa[node.id()].push_back(id);
    }
  }
  allocations_[key] = record;
  WriteCheckpointLocked();
  PublishPodsLocked();
  NotifyLocked();
  if (chosen_ids) *chosen_ids = chosen;
  return record.response;
}

absl::Status KubeletSim::StartContainer(const std::string& pod, const std::string& container) {
  std::vector<AllocationRecord> records;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, record] : allocations_) {
      if (record.pod == pod && record.container == container) records.push_back(record);
    }
  }
  if (records.empty()) {
    return absl::NotFoundError(
        fmt::format("kubelet-sim: no allocation for pod {} container {}", pod, container));
  }
  for (const auto& record : records) {
    auto options = PluginOptions(record.resource);
    if (!options.has_value()) {
      return absl::NotFoundError(fmt::format(
          "endpoint not found in cache for a registered resource: {}", record.resource));
    }
    if (!options->pre_start_required()) continue;
    absl::Status status = PreStart(record.resource, record.device_ids);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          fmt::format("device plugin PreStartContainer rpc failed with err: {}",
                                      std::string(status.message())));
    }
  }
  return absl::OkStatus();
}

void KubeletSim::RemovePod(const std::string& pod) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.pod == pod) {
      auto& in_use = allocated_devices_[it->second.resource];
      for (const auto& id : it->second.device_ids) in_use.erase(id);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  WriteCheckpointLocked();
  PublishPodsLocked();
  NotifyLocked();
}

void KubeletSim::PublishPodsLocked() {
  if (!podresources_) return;
  std::map<std::string, podresources::FakePod> pods;
  for (const auto& [key, record] : allocations_) {
    podresources::FakePod& pod = pods[record.pod];
    pod.ns = "default";
    pod.name = record.pod;
    auto c = std::find_if(
        pod.containers.begin(), pod.containers.end(),
        [&container = record.container](const auto& x) { return x.name == container; });
    if (c == pod.containers.end()) c = pod.containers.insert(c, {record.container, {}});
    for (const auto& id : record.device_ids) {
      podresources::FakeDevice d{record.resource, id, {}};
      for (const auto& [node, ids] : record.devices_per_numa) {
        if (node >= 0 && std::find(ids.begin(), ids.end(), id) != ids.end())
          d.numa_nodes.push_back(node);
      }
      c->devices.push_back(std::move(d));
    }
  }
  std::vector<podresources::FakePod> out;
  for (auto& [name, pod] : pods) out.push_back(std::move(pod));
  podresources_->SetPods(std::move(out));
}

void KubeletSim::WriteCheckpointLocked() {
  if (!options_.write_checkpoint) return;
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, record] : allocations_) {
    nlohmann::json per_numa = nlohmann::json::object();
    for (const auto& [node, ids] : record.devices_per_numa) per_numa[std::to_string(node)] = ids;
    std::string raw;
    record.response.SerializeToString(&raw);
    entries.push_back({{"PodUID", record.pod},
                       {"ContainerName", record.container},
                       {"ResourceName", record.resource},
                       {"DeviceIDs", per_numa},
                       {"AllocResp", absl::Base64Escape(raw)}});
  }
  nlohmann::json registered = nlohmann::json::object();
  for (const auto& [name, state] : resources_) {
    registered[name] = std::vector<std::string>(state.healthy.begin(), state.healthy.end());
  }
  nlohmann::json doc = {
      {"Data", {{"PodDeviceEntries", entries}, {"RegisteredDevices", registered}}},
      {"Checksum", 0}};
  absl::Status status = WriteFileAtomic(CheckpointPath(), DumpJson(doc), 0644);
  if (!status.ok()) LogWarn(Component::kSim, "writing checkpoint: {}", status.ToString());
}

}  // namespace fabric::sim
