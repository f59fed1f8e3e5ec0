// `fabricctl bench`, the libfabric side: open the requested provider (FI_EP_RDM
// with RMA) and one endpoint per thread, each with its own domain, CQ, AV and
// registered buffer. The data path is bench_ops.h; the control protocol and
// the server/client roles are bench.cc.
#ifndef FABRIC_TOOLS_FABRICCTL_BENCH_ENDPOINT_H_
#define FABRIC_TOOLS_FABRICCTL_BENCH_ENDPOINT_H_

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/fabricctl/cli_args.h"
#include "tools/fabricctl/fid.h"

namespace fabric::fabricctl::bench_detail {

// A status that carries the exit code it should end the process with.
struct Failure {
  int exit_code = kExitError;
  std::string message;
};

template <typename T>
struct Outcome {
  std::optional<T> value;
  Failure failure;
  bool ok() const { return value.has_value(); }
};

Failure FailWith(const absl::Status& s, int code = kExitError);

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// One opened provider: the fi_info we chose and the fabric it belongs to.
struct OpenedFabric {
  InfoPtr info;
  FidPtr<fid_fabric> fabric;
  std::string provider() const { return info->fabric_attr->prov_name; }
  std::string fabric_name() const { return info->fabric_attr->name ? info->fabric_attr->name : ""; }
  std::string domain_name() const { return info->domain_attr->name ? info->domain_attr->name : ""; }
};

// fi_getinfo for an RDM endpoint with RMA, pinned to `provider`. `node`
// (with FI_SOURCE) binds IP-addressed providers to the control connection's
// interface; if nothing matches there we retry unbound (e.g. verbs in loopback
// mode, where 127.0.0.1 has no RDMA device) and let the guard judge the result.
Outcome<OpenedFabric> OpenFabric(const std::string& provider, const std::string& domain,
                                 const std::string& node);

// One endpoint with its own domain, CQ, AV and registered buffer.
struct Endpoint {
  std::unique_ptr<char, FreeDeleter> buffer;  // declared first: freed after the MR closes
  uint64_t size = 0;
  FidPtr<fid_domain> domain;
  FidPtr<fid_cq> cq;
  FidPtr<fid_av> av;
  FidPtr<fid_ep> ep;
  FidPtr<fid_mr> mr;
  void* desc = nullptr;
  uint64_t key = 0;
  uint64_t rma_addr = 0;  // what the peer uses as the target address
  std::string name;       // fi_getname
  fi_addr_t peer = FI_ADDR_UNSPEC;
  uint64_t peer_addr = 0;
  uint64_t peer_key = 0;
};

absl::StatusOr<std::unique_ptr<Endpoint>> OpenEndpoint(const OpenedFabric& of, uint64_t size,
                                                       uint64_t requested_key);
absl::Status InsertPeer(Endpoint& e, const std::string& peer_name);
// Reads up to `max` completions into `entries`; returns how many (0: none yet).
absl::StatusOr<int> PollCq(Endpoint& e, fi_cq_entry* entries, int max);

}  // namespace fabric::fabricctl::bench_detail

#endif  // FABRIC_TOOLS_FABRICCTL_BENCH_ENDPOINT_H_
