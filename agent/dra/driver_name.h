// The DRA driver name, shared by the slices (agent/dra) and the kubelet
// plugin (plugin/dra), which otherwise know nothing of each other.
#ifndef FABRIC_AGENT_DRA_DRIVER_NAME_H_
#define FABRIC_AGENT_DRA_DRIVER_NAME_H_

namespace fabric::dra {

inline constexpr char kDriverName[] = "fabric.gpustack.ai";

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_DRIVER_NAME_H_
