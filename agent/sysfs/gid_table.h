// The GID table of an RDMA port, read from sysfs, and the choice an engine
// needs from it: the index of the port's RoCE v2 IPv4 GID (what Mooncake's
// MC_GID_INDEX and NCCL's NCCL_IB_GID_INDEX name).
//
// Kernel formats (drivers/infiniband/core/sysfs.c, cache.c):
//   ports/<n>/gids/<i>             one file per table slot (the table's full length);
//                                  "%pI6": eight 4-digit hex groups, never compressed.
//                                  An empty slot reads as the all-zero GID, no error.
//   ports/<n>/gid_attrs/types/<i>  "IB/RoCE v1" or "RoCE v2"; an empty slot fails the
//                                  read (EINVAL on Linux 6.1, measured in the soft-RoCE VM;
//                                  the reader never relies on which errno).
//   ports/<n>/gid_attrs/ndevs/<i>  the netdev's name; EINVAL for a slot without one
//                                  (InfiniBand, EFA) and for an empty slot.
// A RoCE port holds each IP address of its netdev (and of upper devices such
// as VLANs) once per RoCE version; IPv4 as ::ffff:a.b.c.d. The kernel puts a
// new entry into the lowest free slot (cache.c find_gid), which is why a
// bounded scan (ScanLimit) sees every change between full scans.
#ifndef FABRIC_AGENT_SYSFS_GID_TABLE_H_
#define FABRIC_AGENT_SYSFS_GID_TABLE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/model/device.h"
#include "agent/sysfs/sysfs_layout.h"

namespace fabric::gid {

using GidBytes = std::array<uint8_t, 16>;

// "fe80:0000:0000:0000:5054:00ff:fe12:3456" -> bytes. Exactly eight groups of
// four hex digits (either case), as the kernel prints; kInvalidArgument
// naming the text otherwise.
absl::StatusOr<GidBytes> ParseGid(absl::string_view text);
bool IsZero(const GidBytes& gid);
// ::ffff:a.b.c.d (IPv4-mapped), the form of every IPv4 RoCE GID.
bool IsIpv4Mapped(const GidBytes& gid);
// "10.0.2.15" for an IPv4-mapped GID, "" otherwise.
std::string Ipv4Text(const GidBytes& gid);
// "IB/RoCE v1" -> kIbRoceV1, "RoCE v2" -> kRoceV2, else kOther.
GidType ParseGidType(absl::string_view text);

// How much of a table to read. The inventory reads every slot now and then
// and, in between, slots 0..limit-1 with limit = the highest populated index
// + 2: a new entry lands in the lowest free slot, so it is inside. A bounded
// read takes an entry's type and netdev from `previous` when its GID text is
// unchanged (two reads fewer per entry and poll).
struct GidScan {
  std::optional<int> limit;  // nullopt: every slot listed under gids/
  const std::vector<GidEntry>* previous = nullptr;
};
// Highest populated index + 2 (1 for an empty table): the ScanLimit for `entries`.
int ScanLimit(const std::vector<GidEntry>& entries);

// The populated entries of `ibdev`'s port, by index. A slot whose type read
// fails (emptied between the two reads) is left out; a missing ndevs file or
// a failed read is "no netdev". Errors: the gids directory cannot be listed
// (kNotFound when absent), a GID that does not parse (kInvalidArgument), and
// transient read failures (EMFILE, ENOMEM, EINTR...) as they are.
absl::StatusOr<std::vector<GidEntry>> ReadGidTable(const SysfsLayout& layout,
                                                   const std::string& ibdev, int port,
                                                   GidScan scan = {});

// The RoCE v2 IPv4 GID of a port's own netdev, or why there is none.
//
// The kernel adds to a RoCE port's table the addresses of its netdev and of
// every upper device on it (VLANs, macvlans, a bond master; roce_gid_mgmt.c),
// so the lowest RoCE v2 IPv4 index can be a VLAN's, a macvlan Pod's or a
// floating VIP's address. Only entries whose gid_attrs/ndevs names the port's
// own netdev are candidates, and only a single one is chosen: two on the own
// netdev (a secondary address, a VIP) cannot be told apart from here.
struct RoceV2Ipv4 {
  std::optional<int> index;  // set when exactly one candidate
  std::string gid;           // as in the table
  std::string ipv4;          // "10.0.2.15"
  std::string netdev;
  int candidates = 0;  // RoCE v2 IPv4 GIDs on the port's own netdev
  int on_upper = 0;    // RoCE v2 IPv4 GIDs on other netdevs (upper devices)
  std::string reason;  // why index is unset: "InfiniBand port: no RoCE GIDs", ...
};
// Pure. `own_netdevs`: the device's own netdevs (RdmaDevice::netdevs: the PCI
// function's net/*, rxe's parent). Empty: the netdev of the default GID
// (index 0), which the kernel installs for the port's netdev (for a bonded
// port: for the bond).
RoceV2Ipv4 FindRoceV2Ipv4(const PortInfo& port, bool efa,
                          const std::vector<std::string>& own_netdevs = {});

}  // namespace fabric::gid

#endif  // FABRIC_AGENT_SYSFS_GID_TABLE_H_
