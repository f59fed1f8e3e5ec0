// /proc/<pid>/net/dev: the interface counters of a process's network
// namespace. Pure parsing (fuzzed by test/fuzz/cgroup_fuzzer.cc).
#ifndef FABRIC_AGENT_PODPROCS_NET_DEV_H_
#define FABRIC_AGENT_PODPROCS_NET_DEV_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/podprocs/pod_processes.h"

namespace fabric::podprocs {

// A host namespace with thousands of veths stays well under this.
inline constexpr size_t kMaxNetDevFileBytes = 1 << 20;

// The kernel's format (net/core/net-procfs.c dev_seq_show): two header lines,
// then one line per interface, "%6s:" (name right-aligned, up to 15 bytes,
// so a long name touches its colon and the colon may touch the first number)
// and 16 decimal counters: rx bytes packets errs drop fifo frame compressed
// multicast, tx bytes packets errs drop fifo colls carrier compressed.
// Sums rx and tx bytes over every interface except "lo". InvalidArgument for
// anything else (a missing header, a short line, a non-number, a sum that
// overflows 64 bits, more than kMaxNetDevFileBytes). Interface names are
// returned printable (EscapeBytes when not clean UTF-8): a Pod can name its
// own interfaces anything the kernel allows.
absl::StatusOr<NetBytes> ParseNetDev(absl::string_view text);

}  // namespace fabric::podprocs

#endif  // FABRIC_AGENT_PODPROCS_NET_DEV_H_
