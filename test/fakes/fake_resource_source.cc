#include "test/fakes/fake_resource_source.h"

#include <utility>

namespace fabric::restrack {

FakeResourceSource::FakeResourceSource(std::vector<RdmaResource> resources)
    : resources_(std::move(resources)) {}

void FakeResourceSource::Set(std::vector<RdmaResource> resources) {
  std::lock_guard<std::mutex> lock(mu_);
  resources_ = std::move(resources);
  error_ = absl::OkStatus();
}

void FakeResourceSource::SetError(absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = error.ok() ? absl::InternalError("FakeResourceSource::SetError(OK)") : std::move(error);
}

void FakeResourceSource::SetNotes(DumpNotes notes) {
  std::lock_guard<std::mutex> lock(mu_);
  notes_ = std::move(notes);
}

absl::StatusOr<std::vector<RdmaResource>> FakeResourceSource::Dump() {
  std::lock_guard<std::mutex> lock(mu_);
  ++dump_calls_;
  if (!error_.ok()) return error_;
  return resources_;
}

DumpNotes FakeResourceSource::LastDumpNotes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return notes_;
}

int FakeResourceSource::dump_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dump_calls_;
}

namespace {
RdmaResource Make(ResourceKind kind, const std::string& device, uint32_t id, uint32_t pid) {
  RdmaResource r;
  r.kind = kind;
  r.device = device;
  r.id = id;
  r.pid = pid;
  return r;
}
}  // namespace

RdmaResource Qp(const std::string& device, uint32_t lqpn, uint32_t pid, uint32_t port,
                uint8_t state) {
  RdmaResource r = Make(ResourceKind::kQp, device, lqpn, pid);
  r.port = port;
  r.qp_type = 2;  // IB_QPT_RC
  r.qp_state = state;
  return r;
}
RdmaResource Cq(const std::string& device, uint32_t cqn, uint32_t pid) {
  return Make(ResourceKind::kCq, device, cqn, pid);
}
RdmaResource Mr(const std::string& device, uint32_t mrn, uint32_t pid, uint64_t bytes) {
  RdmaResource r = Make(ResourceKind::kMr, device, mrn, pid);
  r.mr_bytes = bytes;
  return r;
}
RdmaResource Pd(const std::string& device, uint32_t pdn, uint32_t pid) {
  return Make(ResourceKind::kPd, device, pdn, pid);
}
RdmaResource KernelOwned(ResourceKind kind, const std::string& device, uint32_t id,
                         const std::string& kern_name) {
  RdmaResource r = Make(kind, device, id, 0);
  r.kern_name = kern_name;
  if (kind == ResourceKind::kQp) {
    // ib_core owns the ports' MAD QPs (GSI); other kernel owners are ULPs.
    r.qp_type = kern_name == "ib_core" ? kQpTypeGsi : 4;  // GSI or UD (IPoIB's)
    r.qp_state = kQpStateRts;
  }
  return r;
}

}  // namespace fabric::restrack
