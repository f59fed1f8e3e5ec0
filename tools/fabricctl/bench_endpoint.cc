#include "tools/fabricctl/bench_endpoint.h"

#include <fmt/format.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "agent/libfabric/fabric_error.h"
#include "agent/libfabric/libfabric_api.h"

namespace fabric::fabricctl::bench_detail {

Failure FailWith(const absl::Status& s, int code) {
  return Failure{code, std::string(s.message())};
}

Outcome<OpenedFabric> OpenFabric(const std::string& provider, const std::string& domain,
                                 const std::string& node) {
  if (absl::Status loaded = fi::Load(); !loaded.ok()) {
    return {std::nullopt, FailWith(loaded, kExitProviderMissing)};
  }
  InfoPtr hints(fi::AllocInfo());
  if (!hints) return {std::nullopt, {kExitError, "fi_allocinfo failed"}};
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->ep_attr->type = FI_EP_RDM;
  // Every op carries a fi_context2 we own, so both context modes are fine.
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  // One domain per thread, used by that thread only.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (!domain.empty()) hints->domain_attr->name = strdup(domain.c_str());

  fi_info* raw = nullptr;
  int ret = -FI_ENODATA;
  if (!node.empty()) {
    ret = fi::GetInfo(kFabricApiVersion, node.c_str(), nullptr, FI_SOURCE, hints.get(), &raw);
  }
  if (ret == -FI_ENODATA) {
    ret = fi::GetInfo(kFabricApiVersion, nullptr, nullptr, 0, hints.get(), &raw);
  }
  InfoPtr list(raw);
  if (ret == -FI_ENODATA) {
    return {std::nullopt,
            {kExitProviderMissing,
             fmt::format("provider '{}'{} is not available here for FI_EP_RDM with FI_RMA "
                         "({}); refusing to measure another provider",
                         provider, domain.empty() ? "" : " domain '" + domain + "'",
                         std::string(FabricError(ret, "fi_getinfo").message()))}};
  }
  if (ret != 0) return {std::nullopt, FailWith(FabricError(ret, "fi_getinfo"))};
  // Keep only the first entry: that is the one we open.
  InfoPtr chosen(fi::DupInfo(list.get()));
  if (!chosen) return {std::nullopt, {kExitError, "fi_dupinfo failed"}};
  OpenedFabric out;
  fid_fabric* fabric = nullptr;
  ret = fi::Fabric(chosen->fabric_attr, &fabric, nullptr);
  if (ret != 0) return {std::nullopt, FailWith(FabricError(ret, "fi_fabric"))};
  out.fabric.reset(fabric);
  out.info = std::move(chosen);
  return {std::move(out), {}};
}

absl::StatusOr<std::unique_ptr<Endpoint>> OpenEndpoint(const OpenedFabric& of, uint64_t size,
                                                       uint64_t requested_key) {
  auto e = std::make_unique<Endpoint>();
  fi_info* info = of.info.get();
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size) != 0) {
    return absl::ResourceExhaustedError(fmt::format("cannot allocate {} bytes", size));
  }
  e->buffer.reset(static_cast<char*>(mem));
  e->size = size;
  std::memset(mem, 0, size);  // touch the pages before registration and timing

  fid_domain* domain = nullptr;
  if (int r = fi_domain(of.fabric.get(), info, &domain, nullptr); r != 0) {
    return FabricError(r, "fi_domain");
  }
  e->domain.reset(domain);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.wait_obj = FI_WAIT_NONE;
  fid_cq* cq = nullptr;
  if (int r = fi_cq_open(domain, &cq_attr, &cq, nullptr); r != 0) {
    return FabricError(r, "fi_cq_open");
  }
  e->cq.reset(cq);
  fi_av_attr av_attr{};
  av_attr.type =
      info->domain_attr->av_type != FI_AV_UNSPEC ? info->domain_attr->av_type : FI_AV_TABLE;
  av_attr.count = 4;
  fid_av* av = nullptr;
  if (int r = fi_av_open(domain, &av_attr, &av, nullptr); r != 0) {
    return FabricError(r, "fi_av_open");
  }
  e->av.reset(av);
  fid_ep* ep = nullptr;
  if (int r = fi_endpoint(domain, info, &ep, nullptr); r != 0) {
    return FabricError(r, "fi_endpoint");
  }
  e->ep.reset(ep);
  if (int r = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV); r != 0) {
    return FabricError(r, "fi_ep_bind(cq)");
  }
  if (int r = fi_ep_bind(ep, &av->fid, 0); r != 0) return FabricError(r, "fi_ep_bind(av)");
  if (int r = fi_enable(ep); r != 0) return FabricError(r, "fi_enable");

  const int mr_mode = info->domain_attr->mr_mode;
  fid_mr* mr = nullptr;
  if (int r = fi_mr_reg(domain, mem, size, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                        requested_key, 0, &mr, nullptr);
      r != 0) {
    return FabricError(
        r, fmt::format("fi_mr_reg({} bytes; RLIMIT_MEMLOCK applies to verbs/efa)", size));
  }
  e->mr.reset(mr);
  if (mr_mode & FI_MR_ENDPOINT) {
    if (int r = fi_mr_bind(mr, &ep->fid, 0); r != 0) return FabricError(r, "fi_mr_bind");
    if (int r = fi_mr_enable(mr); r != 0) return FabricError(r, "fi_mr_enable");
  }
  e->key = fi_mr_key(mr);  // the provider's key under FI_MR_PROV_KEY, else ours
  if (e->key == FI_KEY_NOTAVAIL) return absl::UnimplementedError("fi_mr_key: key not available");
  // FI_MR_LOCAL: local buffers need their descriptor; passing it always is harmless.
  e->desc = fi_mr_desc(mr);
  // FI_MR_VIRT_ADDR: the target address is the virtual address; else an offset.
  e->rma_addr = (mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(mem) : 0;

  char name[256];
  size_t len = sizeof(name);
  if (int r = fi_getname(&ep->fid, name, &len); r != 0) return FabricError(r, "fi_getname");
  e->name.assign(name, len);
  return e;
}

absl::Status InsertPeer(Endpoint& e, const std::string& peer_name) {
  int n = fi_av_insert(e.av.get(), peer_name.data(), 1, &e.peer, 0, nullptr);
  if (n < 0) return FabricError(n, "fi_av_insert");
  if (n != 1) return absl::InternalError("fi_av_insert: peer address not inserted");
  return absl::OkStatus();
}

absl::StatusOr<int> PollCq(Endpoint& e, fi_cq_entry* entries, int max) {
  ssize_t n = fi_cq_read(e.cq.get(), entries, max);
  if (n > 0) return static_cast<int>(n);
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    ssize_t r = fi_cq_readerr(e.cq.get(), &err, 0);
    if (r < 0) return FabricError(static_cast<int>(r), "fi_cq_readerr");
    const char* detail = fi_cq_strerror(e.cq.get(), err.prov_errno, err.err_data, nullptr, 0);
    return FabricError(err.err,
                       absl::StrCat("RMA completion (provider: ", detail ? detail : "?", ")"));
  }
  return FabricError(static_cast<int>(n), "fi_cq_read");
}

}  // namespace fabric::fabricctl::bench_detail
