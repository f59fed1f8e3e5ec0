// What the node publishes in DRA mode: its pools as resource.k8s.io/v1
// ResourceSlice objects, and the create/update/delete that bring the API
// server's slices there. Pure functions over pool snapshots and JSON; the
// syncer (agent/kubeapi) does the I/O.
//
// One DRA pool per node, named after the node, split into slices of at most
// 128 devices that share the pool's generation and resourceSliceCount.
// Exclusive units are one device each; a shared pool's device is one device
// per token. A unit withdrawn by the exclusive/shared rule (its device is held
// through the other pool mode) is left out; an unhealthy device is published
// with healthy=false (the DeviceClasses select healthy devices only) and, as
// an option, a NoSchedule device taint.
#ifndef FABRIC_AGENT_DRA_RESOURCE_SLICES_H_
#define FABRIC_AGENT_DRA_RESOURCE_SLICES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/dra/dra_names.h"
#include "agent/dra/driver_name.h"
#include "agent/pools/pool_snapshot.h"
#include "nlohmann/json.hpp"

namespace fabric::dra {

// kDriverName: agent/dra/driver_name.h
inline constexpr char kResourceApiVersion[] = "resource.k8s.io/v1";
// The v1 limit on spec.devices.
inline constexpr size_t kMaxDevicesPerSlice = 128;
// The standard attribute of the PCIe root complex (KEP-4381), which GPU
// drivers publish too, so a claim can match a GPU and a NIC on one root.
inline constexpr char kPcieRootAttribute[] = "resource.kubernetes.io/pcieRoot";
inline constexpr char kUnhealthyTaintKey[] = "fabric.gpustack.ai/unhealthy";

struct SliceOptions {
  // Also taint unhealthy devices (key kUnhealthyTaintKey, effect NoSchedule,
  // value the health cause). Needs the DRADeviceTaints gate on the API server
  // (alpha in 1.33, off by default); where it is off the server drops the
  // field, the slices never match what was written, and every sync rewrites.
  bool taint_unhealthy = false;
  size_t max_devices_per_slice = kMaxDevicesPerSlice;
};

struct SliceInput {
  std::string node_name;
  std::string driver_name = kDriverName;
  std::vector<std::shared_ptr<const PoolSnapshot>> pools;
  // The slices published now (listed from the API server, or the last build):
  // the generation continues from theirs, and stays when the content is the
  // same. Slices of other drivers, nodes or pools in here are ignored.
  std::vector<nlohmann::json> published;
  SliceOptions options;
};

struct ResourceSliceSet {
  // "<node>-<driver>-<i>", i = 0..n-1; at least one slice, even with no
  // devices, so the scheduler sees the node's pool as complete and empty.
  std::vector<nlohmann::json> slices;
  int64_t generation = 1;
  size_t device_count = 0;
  // Every unit's name (withdrawn ones too): the way back from a claim's
  // allocated device name to the pool unit.
  DraNames names;
  // Attributes left out, one line each (a string over the API's 64 bytes).
  std::vector<std::string> warnings;
};

// The slices for `in`, in a deterministic order (devices by name, naturally
// ordered): the same input gives the same JSON and the same generation.
ResourceSliceSet BuildResourceSlices(const SliceInput& in);

// The name of slice `index`: "<node>-<driver>-<index>", shortened with a hash
// of the node name where it would pass the 253-byte object-name limit.
std::string SliceName(const std::string& node, const std::string& driver, size_t index);

// True when the two sets publish the same devices in the same slices: equal
// names and specs, ignoring the pool generation, what the server adds
// (metadata other than the name, a taint's timeAdded) and slice order.
bool SameSliceContent(const std::vector<nlohmann::json>& a, const std::vector<nlohmann::json>& b);

// The pool generation for `desired` given what is `published` for the same
// driver, node and pool: 1 when nothing is; the highest published generation
// when the content is the same; one more when it changed.
int64_t NextPoolGeneration(const std::vector<nlohmann::json>& published,
                           const std::vector<nlohmann::json>& desired);

// What the syncer must do to turn `listed` (from the API server) into
// `desired`. Only slices whose spec.driver and spec.nodeName are ours count;
// other drivers' and nodes' slices are never touched.
struct SliceDiff {
  std::vector<nlohmann::json> create;  // desired slices with no listed twin
  // Desired slices whose listed twin differs (spec, generation included, or
  // the labels/ownerReferences desired sets), with the listed
  // metadata.resourceVersion, so a PUT fails on a concurrent change.
  std::vector<nlohmann::json> update;
  std::vector<std::string> remove;  // names of listed slices not desired
  bool empty() const { return create.empty() && update.empty() && remove.empty(); }
};
// Apply creates and updates before deletes, so a slice goes away only once the
// new generation is complete without it.
SliceDiff DiffSlices(const std::vector<nlohmann::json>& desired,
                     const std::vector<nlohmann::json>& listed, const std::string& driver,
                     const std::string& node);

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_RESOURCE_SLICES_H_
