// The node-feature-discovery local feature file (features.d): what the node
// has, as NFD labels. Rendering is pure; the writer skips unchanged content so
// NFD's watcher is not poked for nothing.
#ifndef FABRIC_AGENT_NFD_NFD_FEATURES_H_
#define FABRIC_AGENT_NFD_NFD_FEATURES_H_

#include <string>

#include "absl/status/status.h"
#include "agent/model/device.h"

namespace fabric::nfd {

// fabric-efa.present/count and fabric-rdma.present/count, one per line.
std::string RenderFeatures(const NodeInventory& inventory);

// Writes RenderFeatures(inventory) to `path` atomically unless the file
// already holds exactly that.
absl::Status WriteFeatures(const std::string& path, const NodeInventory& inventory);

}  // namespace fabric::nfd

#endif  // FABRIC_AGENT_NFD_NFD_FEATURES_H_
