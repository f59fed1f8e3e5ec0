// The JSON documents of /v1/pods and `fabricctl observe -o json` (schema v1,
// docs/observe.md). Keys the issue names come first and keep their names;
// later versions may add keys, never rename or drop one.
#ifndef FABRIC_AGENT_OBSERVE_DOCUMENT_H_
#define FABRIC_AGENT_OBSERVE_DOCUMENT_H_

#include <string>

#include "agent/observe/transport.h"

namespace fabric::observe {

inline constexpr char kApiVersion[] = "fabric.gpustack.ai/v1";
inline constexpr char kPodKind[] = "PodTransport";
inline constexpr char kListKind[] = "PodTransportList";

// One Pod: {"apiVersion", "kind": "PodTransport", "namespace", "pod",
// "window_seconds", "containers": [{"name", "verdict", "attribution",
// "fabric_bytes", "other_bytes", "devices": [{"device", "resource", "kind",
// "owned": {"qp", "qp_active", "cq", "mr", "mr_bytes", "pd"}, "fabric_bytes",
// "fabric_packets", "attribution", "holders"}], "evidence", "fabric_packets",
// "fallback", "reason", "host_network", "container_ids", "last_non_idle"}],
// "pod_uid", "host_network", "window": {"start", "end", "requested_seconds",
// "samples", "shorter"}, "floor_bytes", "floor_packets"}. JSON text, with a
// final newline.
std::string PodDocument(const PodObservation& pod, const WindowResult& result);

// Every Pod: {"apiVersion", "kind": "PodTransportList", "window_seconds",
// "window", "floor_bytes", "floor_packets", "items": [PodDocument...]}.
std::string ListDocument(const WindowResult& result);

// RFC 3339 in UTC with milliseconds ("2026-12-02T00:41:07.512Z").
std::string Rfc3339(absl::Time t);

}  // namespace fabric::observe

#endif  // FABRIC_AGENT_OBSERVE_DOCUMENT_H_
