// The RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV) messages we send and
// parse, separate from the socket code so the encoding is unit-tested without
// an RDMA-capable kernel. Layout as iproute2 `rdma` and rdma-cni
// (vishvananda/netlink rdma_link_linux.go): no family header, attributes
// right after the nlmsghdr.
#ifndef FABRIC_AGENT_NETNS_RDMA_NETLINK_WIRE_H_
#define FABRIC_AGENT_NETNS_RDMA_NETLINK_WIRE_H_

#include <linux/netlink.h>

#include <cstdint>

#include "agent/netns/rdma_netlink.h"

namespace fabric::netns::wire {

// Builders write one request into `buf` (at least MNL_SOCKET_BUFFER_SIZE bytes).
// RDMA_NLDEV_CMD_SYS_GET, NLM_F_REQUEST|NLM_F_ACK (`rdma system`).
nlmsghdr* PutSysGet(char* buf);
// RDMA_NLDEV_CMD_GET dump, NLM_F_REQUEST|NLM_F_ACK|NLM_F_DUMP (`rdma dev`).
nlmsghdr* PutDevDump(char* buf);
// RDMA_NLDEV_CMD_SET, NLM_F_REQUEST|NLM_F_ACK, RDMA_NLDEV_ATTR_DEV_INDEX (u32)
// + RDMA_NLDEV_NET_NS_FD (u32) (`rdma dev set DEV netns NS`).
nlmsghdr* PutDevSetNetns(char* buf, uint32_t dev_index, uint32_t netns_fd);

enum class ParseResult { kOk, kAbsent, kMalformed };
// A device message of a GET dump: index + name.
ParseResult ParseDevice(const nlmsghdr* nlh, RdmaLink* out);
// A SYS_GET reply: RDMA_NLDEV_SYS_ATTR_NETNS_MODE (u8, 0 = exclusive).
ParseResult ParseNetnsMode(const nlmsghdr* nlh, NetnsMode* out);

}  // namespace fabric::netns::wire

#endif  // FABRIC_AGENT_NETNS_RDMA_NETLINK_WIRE_H_
