#include "agent/netns/rdma_netlink.h"

namespace fabric::netns {

const char* NetnsModeName(NetnsMode mode) {
  return mode == NetnsMode::kExclusive ? "exclusive" : "shared";
}

}  // namespace fabric::netns
