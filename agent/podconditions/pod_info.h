// What the agent reads of a Pod from the API server (its own node's Pods,
// through a watch): identity, the attach-grace annotation, each container's
// state and the Pod's fabric.gpustack.ai/ conditions as they are now. Parsed
// from the API's JSON by one pure function that takes any bytes' worth of
// JSON without throwing.
#ifndef FABRIC_AGENT_PODCONDITIONS_POD_INFO_H_
#define FABRIC_AGENT_PODCONDITIONS_POD_INFO_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace fabric::podconditions {

inline constexpr char kConditionPrefix[] = "fabric.gpustack.ai/";
inline constexpr char kFabricAttached[] = "fabric.gpustack.ai/FabricAttached";
inline constexpr char kTransport[] = "fabric.gpustack.ai/Transport";
inline constexpr char kAttachGraceAnnotation[] = "fabric.gpustack.ai/attach-grace";

// One Pod condition as the API holds it (status "True", "False", "Unknown").
struct Condition {
  std::string type, status, reason, message;
  absl::Time last_transition = absl::InfinitePast();
  // Same type, status, reason and message (the time is not compared).
  bool SameValue(const Condition& o) const {
    return type == o.type && status == o.status && reason == o.reason && message == o.message;
  }
};

struct ContainerState {
  std::string name;
  // A sidecar: an init container with restartPolicy Always (Kubernetes
  // 1.29+, SidecarContainers). It runs for the Pod's life and may hold a
  // grant, so it is one of the Pod's containers for every rule here.
  bool sidecar = false;
  std::string id;  // the runtime's ID without its "containerd://" scheme; "" before it is created
  bool running = false;
  absl::Time started_at = absl::InfinitePast();  // state.running.startedAt
  int restart_count = 0;
};

struct PodInfo {
  std::string uid, ns, name, node;
  std::string resource_version;
  std::optional<std::string> attach_grace;  // the annotation, as written
  // The sidecars (spec.initContainers order), then spec.containers, with
  // their status: the kubelet starts them in that order, and PodResources
  // lists them so.
  std::vector<ContainerState> containers;
  std::vector<std::string> init_containers;  // names of the plain (run-to-completion) ones
  std::vector<std::string> readiness_gates;  // conditionType of each gate
  std::map<std::string, Condition> fabric_conditions;  // by type, fabric.gpustack.ai/ ones only
  bool terminal = false;  // phase Succeeded or Failed, or being deleted
};

// Parses a Pod object. InvalidArgument naming the field when the identity
// (metadata.uid, namespace, name) is missing or not a string; every other
// field is optional and a malformed one is skipped.
absl::StatusOr<PodInfo> ParsePod(const nlohmann::json& pod);

// "2026-12-02T00:41:07Z" (and fractional seconds) to a time; nullopt when not RFC 3339.
std::optional<absl::Time> ParseApiTime(const nlohmann::json& v);
// RFC 3339 in UTC, whole seconds (metav1.Time) or microseconds (metav1.MicroTime).
std::string ApiTime(absl::Time t);
std::string ApiMicroTime(absl::Time t);

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_POD_INFO_H_
