// The kernel's RDMA netlink resource dumps as the agent receives them:
// agent/restrack/restrack_wire.h FeedBuffer (framing through libmnl) into a
// ResourceDumpParser (RDMA_NLDEV_CMD_RES_{QP,CQ,MR,PD,CTX}_GET replies) or a
// DeviceListParser (RDMA_NLDEV_CMD_GET).
// Input: byte 0 picks the parser (bits 0-1: qp/cq/mr/pd; bit 3: ctx instead;
// bit 2: the device list instead of either); the rest is one received
// datagram (netlink messages).
// Invariant: no crash, no read outside the input; a refusal is kInvalidArgument
// or kResourceExhausted naming the command; every accepted entry is of the
// asked kind, on a clean non-empty device name, with a clean kern_name and at
// most one owner (pid or kern_name), mr_bytes only on MRs, a port only on
// QPs, a PD link only on user QPs and MRs, a context link only on user PDs
// and CQs; dropped + accepted never exceed the entries seen; and the accepted
// entries, written back the way the kernel lays them out, parse the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/base/utf8.h"
#include "agent/restrack/restrack_wire.h"
#include "test/fakes/restrack_test_util.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::restrack::RdmaResource;
using fabric::restrack::ResourceKind;
namespace wire = fabric::restrack::wire;
namespace rt = fabric::restrack::testing;

constexpr size_t kMaxEntries = 2000;  // small, so the bound is reached too

bool Clean(const std::string& s) { return fabric::CheckExternalName("x", s, 64).ok(); }

void CheckRefusal(const absl::Status& st, const char* command) {
  FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument ||
             st.code() == absl::StatusCode::kResourceExhausted);
  FUZZ_CHECK(std::string(st.message()).rfind(command, 0) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view datagram(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 4) {
    wire::DeviceListParser list;
    wire::FeedResult r = wire::FeedBuffer(datagram, 0, 0, list, "RDMA_NLDEV_CMD_GET");
    if (r.state == wire::FeedResult::State::kFailed) CheckRefusal(r.error, "RDMA_NLDEV_CMD_GET");
    if (r.state == wire::FeedResult::State::kKernelError) FUZZ_CHECK(r.kernel_errno > 0);
    FUZZ_CHECK(list.devices().size() <= wire::kMaxDevices);
    return 0;
  }
  const auto kind = (data[0] & 8) ? ResourceKind::kCtx : static_cast<ResourceKind>(data[0] & 3);
  const char* command = wire::CommandName(kind);
  wire::ResourceDumpParser parser(kind, std::nullopt, kMaxEntries);
  wire::FeedResult r = wire::FeedBuffer(datagram, 0, 0, parser, command);
  if (r.state == wire::FeedResult::State::kFailed) CheckRefusal(r.error, command);
  if (r.state == wire::FeedResult::State::kKernelError) FUZZ_CHECK(r.kernel_errno > 0);
  FUZZ_CHECK(parser.entries_seen() <= kMaxEntries);
  FUZZ_CHECK(parser.resources().size() + parser.rejected() <= parser.entries_seen());
  for (const std::string& reason : parser.reasons()) {
    FUZZ_CHECK(fabric::CheckExternalName("reason", reason, 1 << 16).ok());
  }
  if (r.state != wire::FeedResult::State::kMore && r.state != wire::FeedResult::State::kDone) {
    return 0;  // a failed dump's entries are discarded by the source
  }

  // Written back the way the kernel lays them out (consecutive entries of a
  // device share a message, at most 64 to a message), they parse the same.
  std::string again;
  const std::vector<RdmaResource>& got = parser.resources();
  for (size_t i = 0; i < got.size();) {
    std::vector<rt::KernelEntry> entries;
    size_t j = i;
    for (; j < got.size() && j - i < 64 && got[j].device == got[i].device; ++j) {
      const RdmaResource& res = got[j];
      FUZZ_CHECK(res.kind == kind);
      FUZZ_CHECK(!res.device.empty() && Clean(res.device));
      FUZZ_CHECK(Clean(res.kern_name));
      FUZZ_CHECK(res.pid == 0 || res.kern_name.empty());
      FUZZ_CHECK(kind == ResourceKind::kMr || res.mr_bytes == 0);
      FUZZ_CHECK(kind == ResourceKind::kQp || res.port == 0);
      FUZZ_CHECK(!res.pdn || ((kind == ResourceKind::kQp || kind == ResourceKind::kMr) &&
                              res.kern_name.empty()));
      FUZZ_CHECK(!res.ctxn || ((kind == ResourceKind::kPd || kind == ResourceKind::kCq) &&
                               res.kern_name.empty()));
      rt::KernelEntry e;
      e.port = res.port;
      e.id = res.id;
      e.pid = res.pid;
      e.kern_name = res.kern_name;
      e.mr_bytes = res.mr_bytes;
      e.qp_type = res.qp_type;
      e.qp_state = res.qp_state;
      e.pdn = res.pdn;
      e.ctxn = res.ctxn;
      entries.push_back(e);
    }
    again += rt::ResourceMessage(kind, 1, got[i].device, entries);
    i = j;
  }
  wire::ResourceDumpParser reparsed(kind, 1, kMaxEntries);
  wire::FeedResult r2 = wire::FeedBuffer(again, 0, 0, reparsed, command);
  FUZZ_CHECK(r2.state == wire::FeedResult::State::kMore);
  FUZZ_CHECK(reparsed.rejected() == 0);
  FUZZ_CHECK(reparsed.resources() == parser.resources());
  return 0;
}
