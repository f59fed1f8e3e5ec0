#include "tools/fabricctl/check_verbs.h"

#include <fmt/format.h>
#include <net/if.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"
#include "agent/sysfs/gid_table.h"
#include "agent/sysfs/sysfs_layout.h"
#include "agent/verbs/verbs_handles.h"
#include "tools/fabricctl/check_verdict.h"

namespace fabric::fabricctl {
namespace {

constexpr uint32_t kAmazonVendor = 0x1d0f;
constexpr auto kLoopbackTimeout = std::chrono::seconds(10);

// An anonymous mapping for stage 4's registration, unmapped on scope exit.
class Buffer {
 public:
  explicit Buffer(size_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) data_ = static_cast<char*>(p);
  }
  ~Buffer() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return data_; }

 private:
  size_t size_;
  char* data_ = nullptr;
};

std::string PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

std::string LinkLayerName(uint8_t l) {
  if (l == IBV_LINK_LAYER_INFINIBAND) return "InfiniBand";
  if (l == IBV_LINK_LAYER_ETHERNET) return "Ethernet";
  return "Unspecified";
}

int MtuBytes(ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0; }

std::string GidText(const ibv_gid& g) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    out += fmt::format("{}{:02x}{:02x}", i ? ":" : "", g.raw[i], g.raw[i + 1]);
  }
  return out;
}

// The process's view of a device: context, PD, MR and the stage-5 queues,
// released in reverse order.
struct Opened {
  verbs::ContextPtr ctx;
  verbs::PdPtr pd;
  std::unique_ptr<Buffer> buffer;
  verbs::MrPtr mr;
  verbs::CqPtr cq_a, cq_b;
  verbs::QpPtr qp_a, qp_b;
  ibv_port_attr port{};
};

void Fail(StageOutcome* s, int err, std::string detail) {
  s->status = StageStatus::kFailed;
  s->err = err;
  s->detail = std::move(detail);
}

void Skip(StageOutcome* s, std::string why) {
  s->status = StageStatus::kSkipped;
  s->detail = std::move(why);
}

void Stage2Port(FabricDeviceFacts& d, Opened& o) {
  ibv_device_attr dev{};
  if (int r = verbs::QueryDevice(o.ctx.get(), &dev); r != 0) {
    return Fail(&d.port, verbs::VerbsErrno(r), "ibv_query_device");
  }
  d.efa = dev.vendor_id == kAmazonVendor;
  d.port.status = StageStatus::kOk;
  for (uint8_t n = 1; n <= dev.phys_port_cnt; ++n) {
    ibv_port_attr a{};
    if (int r = verbs::QueryPort(o.ctx.get(), n, &a); r != 0) {
      return Fail(&d.port, verbs::VerbsErrno(r), fmt::format("ibv_query_port(port {})", n));
    }
    PortFacts p{n,     PortStateName(a.state), LinkLayerName(a.link_layer), MtuBytes(a.active_mtu),
                a.lid, a.gid_tbl_len,          a.state == IBV_PORT_ACTIVE};
    if (d.ports.empty()) o.port = a;
    if (!p.active) Fail(&d.port, 0, fmt::format("port {} is {}", n, p.state));
    d.ports.push_back(p);
  }
  if (d.ports.empty()) Fail(&d.port, 0, "the device reports no port");
  if (!d.ports.empty()) d.gid_port = d.ports.front().number;
}

void Stage3Gid(FabricDeviceFacts& d, Opened& o, const std::string& sysfs_root) {
  size_t max = 0;
  for (const PortFacts& p : d.ports) max += static_cast<size_t>(p.gid_table_len);
  std::vector<ibv_gid_entry> entries(std::max<size_t>(max, 1));
  const ssize_t n = verbs::QueryGidTable(o.ctx.get(), entries.data(), entries.size());
  if (n < 0) return Fail(&d.gid, static_cast<int>(-n), "ibv_query_gid_table");
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = entries[i];
    if (static_cast<int>(e.port_num) != d.gid_port) continue;
    GidEntry g;
    g.index = static_cast<int>(e.gid_index);
    g.gid = GidText(e.gid);
    g.type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? GidType::kRoceV2 : GidType::kIbRoceV1;
    g.netdev = GidNetdevName(sysfs_root, d.ibdev, d.gid_port, g.index, e.ndev_ifindex);
    d.gids.push_back(std::move(g));
  }
  d.netdevs = DeviceNetdevs(sysfs_root, d.ibdev);
  d.gid.status = StageStatus::kOk;
}

void Stage4Mr(FabricDeviceFacts& d, Opened& o, uint64_t mr_size) {
  o.pd.reset(verbs::AllocPd(o.ctx.get()));
  if (!o.pd) return Fail(&d.mr, verbs::VerbsErrno(-1), "ibv_alloc_pd");
  o.buffer = std::make_unique<Buffer>(mr_size);
  if (o.buffer->data() == nullptr) {
    return Fail(&d.mr, errno, fmt::format("mmap of {} for the registration", FormatBytes(mr_size)));
  }
  errno = 0;
  o.mr.reset(
      verbs::RegMr(o.pd.get(), o.buffer->data(), mr_size,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
  if (!o.mr)
    return Fail(&d.mr, verbs::VerbsErrno(-1),
                fmt::format("ibv_reg_mr of {}", FormatBytes(mr_size)));
  d.mr_bytes = mr_size;
  d.mr.status = StageStatus::kOk;
}

ibv_qp* CreateQueuePair(const FabricDeviceFacts& d, Opened& o, ibv_cq* cq) {
  ibv_qp_cap cap{};
  cap.max_send_wr = 4;
  cap.max_recv_wr = 4;
  cap.max_send_sge = 1;
  cap.max_recv_sge = 1;
  if (d.efa) {
    ibv_qp_init_attr_ex attr{};
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = o.pd.get();
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.cap = cap;
    attr.qp_type = IBV_QPT_DRIVER;
    efadv_qp_init_attr efa{};
    efa.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
    return verbs::EfaCreateQpEx(o.ctx.get(), &attr, &efa);
  }
  ibv_qp_init_attr attr{};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.cap = cap;
  attr.qp_type = IBV_QPT_RC;
  return verbs::CreateQp(o.pd.get(), &attr);
}

void Stage5Qp(FabricDeviceFacts& d, Opened& o) {
  d.qp_type = d.efa ? "SRD" : "RC";
  if (d.efa) {
    if (absl::Status s = verbs::LoadEfa(); !s.ok()) {
      return Fail(&d.qp, 0, std::string(s.message()));
    }
  }
  o.cq_a.reset(verbs::CreateCq(o.ctx.get(), 16));
  if (!o.cq_a) return Fail(&d.qp, verbs::VerbsErrno(-1), "ibv_create_cq");
  o.qp_a.reset(CreateQueuePair(d, o, o.cq_a.get()));
  if (!o.qp_a) {
    return Fail(&d.qp, verbs::VerbsErrno(-1),
                d.efa ? "efadv_create_qp_ex (SRD)" : "ibv_create_qp (RC)");
  }
  d.qpn = o.qp_a->qp_num;
  d.qp.status = StageStatus::kOk;
}

// INIT -> RTR -> RTS of `qp` towards `peer_qpn` on the same port: over the
// GID at `gid_index` on RoCE (is_global), the port's LID on InfiniBand.
int Connect(ibv_qp* qp, uint32_t peer_qpn, const Opened& o, uint8_t port, int gid_index,
            const ibv_gid& gid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int r = verbs::ModifyQp(qp, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      r != 0) {
    return r;
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = o.port.active_mtu;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = port;
  if (gid_index >= 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
    a.ah_attr.grh.hop_limit = 64;
  } else {
    a.ah_attr.dlid = o.port.lid;
  }
  if (int r = verbs::ModifyQp(qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      r != 0) {
    return r;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return verbs::ModifyQp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Waits for `want` completions on `cq`; "" when all succeeded, else why.
std::string Await(ibv_cq* cq, int want, std::chrono::steady_clock::time_point deadline) {
  while (want > 0) {
    ibv_wc wc[4];
    const int n = ibv_poll_cq(cq, 4, wc);
    if (n < 0) return "ibv_poll_cq failed";
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        return fmt::format("work completion {} (vendor error {:#x})",
                           verbs::WcStatusStr(wc[i].status), wc[i].vendor_err);
      }
    }
    want -= n;
    if (want > 0 && std::chrono::steady_clock::now() > deadline) {
      return fmt::format("no completion within {} s", kLoopbackTimeout.count());
    }
  }
  return "";
}

// The GID the loopback addresses on RoCE: the RoCE v2 IPv4 one, else any
// RoCE v2, else the first; -1 on InfiniBand (LID routed).
int LoopbackGidIndex(const FabricDeviceFacts& d) {
  if (d.ports.empty() || d.ports.front().link_layer != "Ethernet") return -1;
  PortInfo port;
  port.link_layer = "Ethernet";
  port.gids = d.gids;
  if (auto c = gid::FindRoceV2Ipv4(port, false, d.netdevs); c.index) return *c.index;
  for (const GidEntry& e : d.gids) {
    if (e.type == GidType::kRoceV2) return e.index;
  }
  return d.gids.empty() ? -2 : d.gids.front().index;
}

// Stage 6: A writes a pattern into B's region, then sends it; both land
// byte for byte. The MR of stage 4 holds source, write target and receive
// buffer.
void LoopbackRc(FabricDeviceFacts& d, Opened& o) {
  const int gid_index = LoopbackGidIndex(d);
  if (gid_index == -2) return Fail(&d.loopback, 0, "the port has no GID to address");
  d.loopback_gid_index = gid_index;
  ibv_gid gid{};
  for (const GidEntry& e : d.gids) {
    if (e.index != gid_index) continue;
    auto bytes = gid::ParseGid(e.gid);
    if (bytes.ok()) std::memcpy(gid.raw, bytes->data(), 16);
  }
  o.cq_b.reset(verbs::CreateCq(o.ctx.get(), 16));
  if (!o.cq_b) return Fail(&d.loopback, verbs::VerbsErrno(-1), "ibv_create_cq (second QP)");
  o.qp_b.reset(CreateQueuePair(d, o, o.cq_b.get()));
  if (!o.qp_b) return Fail(&d.loopback, verbs::VerbsErrno(-1), "ibv_create_qp (second RC QP)");
  const uint8_t port = static_cast<uint8_t>(d.gid_port);
  if (int r = Connect(o.qp_a.get(), o.qp_b->qp_num, o, port, gid_index, gid); r != 0) {
    return Fail(&d.loopback, verbs::VerbsErrno(r), "ibv_modify_qp (first QP to RTS)");
  }
  if (int r = Connect(o.qp_b.get(), o.qp_a->qp_num, o, port, gid_index, gid); r != 0) {
    return Fail(&d.loopback, verbs::VerbsErrno(r), "ibv_modify_qp (second QP to RTS)");
  }
  const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(64 * 1024, d.mr_bytes / 4));
  char* base = o.buffer->data();
  for (uint32_t i = 0; i < chunk; ++i) base[i] = static_cast<char>((i * 7 + 13) & 0xff);
  std::memset(base + chunk, 0, 2 * chunk);
  const uint32_t lkey = o.mr->lkey;
  ibv_sge recv_sge{reinterpret_cast<uintptr_t>(base + 2 * chunk), chunk, lkey};
  ibv_recv_wr recv{};
  recv.sg_list = &recv_sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  const auto start = std::chrono::steady_clock::now();
  if (int r = ibv_post_recv(o.qp_b.get(), &recv, &bad_recv); r != 0) {
    return Fail(&d.loopback, verbs::VerbsErrno(r), "ibv_post_recv");
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(base), chunk, lkey};
  ibv_send_wr write{}, send{};
  write.wr_id = 1;
  write.sg_list = &sge;
  write.num_sge = 1;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.send_flags = IBV_SEND_SIGNALED;
  write.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(base + chunk);
  write.wr.rdma.rkey = o.mr->rkey;
  write.next = &send;
  send.wr_id = 2;
  send.sg_list = &sge;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad_send = nullptr;
  if (int r = ibv_post_send(o.qp_a.get(), &write, &bad_send); r != 0) {
    return Fail(&d.loopback, verbs::VerbsErrno(r), "ibv_post_send");
  }
  const auto deadline = start + kLoopbackTimeout;
  if (std::string e = Await(o.cq_a.get(), 2, deadline); !e.empty()) {
    return Fail(&d.loopback, 0, "RDMA write and send: " + e);
  }
  if (std::string e = Await(o.cq_b.get(), 1, deadline); !e.empty()) {
    return Fail(&d.loopback, 0, "receive: " + e);
  }
  d.loopback_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (std::memcmp(base, base + chunk, chunk) != 0) {
    return Fail(&d.loopback, 0, "the RDMA write completed but the target holds other bytes");
  }
  if (std::memcmp(base, base + 2 * chunk, chunk) != 0) {
    return Fail(&d.loopback, 0, "the send completed but the receive buffer holds other bytes");
  }
  d.loopback_bytes = 2ull * chunk;
  d.loopback.status = StageStatus::kOk;
}

}  // namespace

std::string GidNetdevName(const std::string& sysfs_root, const std::string& ibdev, int port,
                          int index, uint32_t ndev_ifindex) {
  if (ndev_ifindex == 0) return "";  // the kernel names none (IB, EFA)
  const SysfsLayout layout(sysfs_root);
  auto name = ReadTrimmed(absl::StrCat(layout.PortGidNdevsDir(ibdev, port), "/", index));
  if (!name.ok() || !CheckExternalName("netdev name", *name, IF_NAMESIZE - 1).ok()) return "";
  return *name;
}

std::vector<std::string> DeviceNetdevs(const std::string& sysfs_root, const std::string& ibdev) {
  const SysfsLayout layout(sysfs_root);
  std::vector<std::string> out;
  if (auto names = ListDir(layout.PciFunctionLink(ibdev) + "/net"); names.ok()) {
    out = *std::move(names);
  } else if (auto parent = ReadTrimmed(layout.DeviceDir(ibdev) + "/parent"); parent.ok()) {
    out.push_back(*parent);
  }
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const std::string& n) {
                             return !CheckExternalName("netdev name", n, IF_NAMESIZE - 1).ok();
                           }),
            out.end());
  return out;
}

FabricRun CollectFabric(const std::vector<DeviceNodeFacts>& nodes, const std::string& dev_root,
                        const std::string& sysfs_root, uint64_t mr_size) {
  FabricRun run;
  if (dev_root != "/dev") {
    run.skipped_reason = fmt::format(
        "libibverbs opens /dev/infiniband only; --dev-root is {}: stages 2-6 not run", dev_root);
  }
  absl::Status loaded = run.skipped_reason.empty() ? verbs::Load() : absl::OkStatus();
  verbs::DeviceListPtr list;
  int count = 0;
  if (run.skipped_reason.empty() && loaded.ok()) list.reset(verbs::GetDeviceList(&count));
  for (const DeviceNodeFacts& n : nodes) {
    if (n.kind != NodeKind::kUverbs) continue;
    FabricDeviceFacts d;
    d.node = n.rel_path;
    d.ibdev = n.ibdev;
    const std::string dev_name = n.rel_path.substr(n.rel_path.rfind('/') + 1);
    const std::string later = "stage 1 failed";
    if (n.probed && n.open_errno != 0) {
      Fail(&d.open, n.open_errno, fmt::format("open({})", n.path));
    } else if (!run.skipped_reason.empty()) {
      d.open.status = StageStatus::kOk;
      d.open.detail = "open(2) only";
    } else if (!loaded.ok()) {
      d.verbs_missing = true;
      Fail(&d.open, 0, std::string(loaded.message()));
    } else {
      ibv_device* found = nullptr;
      for (int i = 0; list && i < count; ++i) {
        if (dev_name == list.get()[i]->dev_name) found = list.get()[i];
      }
      if (found == nullptr) {
        d.verbs_missing = true;
        Fail(&d.open, 0,
             fmt::format("libibverbs does not list {} ({}): no provider for it in this image "
                         "(ibverbs-providers), or IBV_SHOW_WARNINGS=1 says why",
                         dev_name, d.ibdev.empty() ? "?" : d.ibdev));
      } else {
        if (d.ibdev.empty()) d.ibdev = verbs::GetDeviceName(found);
        Opened o;
        errno = 0;
        o.ctx.reset(verbs::OpenDevice(found));
        if (!o.ctx) {
          Fail(&d.open, verbs::VerbsErrno(-1),
               fmt::format("ibv_open_device({}) after open(2) succeeded", d.ibdev));
        } else {
          d.open.status = StageStatus::kOk;
          Stage2Port(d, o);
          if (d.ports.empty()) {
            Skip(&d.gid, "no port");
          } else {
            Stage3Gid(d, o, sysfs_root);
          }
          Stage4Mr(d, o, mr_size);
          if (o.pd) {
            Stage5Qp(d, o);
          } else {
            Skip(&d.qp, "no protection domain (stage 4)");
          }
          if (d.efa) {
            Skip(&d.loopback, "EFA has no RC QPs (SRD needs an address handle per peer)");
          } else if (d.port.status != StageStatus::kOk || d.mr.status != StageStatus::kOk ||
                     d.qp.status != StageStatus::kOk) {
            Skip(&d.loopback, "needs stages 2, 4 and 5");
          } else {
            LoopbackRc(d, o);
          }
        }
      }
    }
    if (d.open.status != StageStatus::kOk) {
      for (StageOutcome* s : {&d.port, &d.gid, &d.mr, &d.qp, &d.loopback}) Skip(s, later);
    } else if (!run.skipped_reason.empty()) {
      for (StageOutcome* s : {&d.port, &d.gid, &d.mr, &d.qp, &d.loopback}) {
        Skip(s, run.skipped_reason);
      }
    }
    run.devices.push_back(std::move(d));
  }
  return run;
}

}  // namespace fabric::fabricctl
