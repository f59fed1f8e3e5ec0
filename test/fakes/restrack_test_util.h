// Test-only: RDMA netlink replies laid out the way the kernel writes them
// (drivers/infiniband/core/nldev.c: fill_nldev_handle, then the nested table,
// one *_ENTRY nest per resource, each with the attributes fill_res_*_entry
// puts, in its order), built with libmnl as the kernel builds them with
// nla_put_*.
#ifndef FABRIC_TEST_FAKES_RESTRACK_TEST_UTIL_H_
#define FABRIC_TEST_FAKES_RESTRACK_TEST_UTIL_H_

#include <libmnl/libmnl.h>
#include <rdma/rdma_netlink.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "agent/restrack/rdma_resources.h"
#include "agent/restrack/restrack_wire.h"

namespace fabric::restrack::testing {

// One resource as the kernel describes it.
struct KernelEntry {
  uint32_t port = 0;  // QPs: 0 = not bound yet (no PORT_INDEX)
  uint32_t id = 0;
  uint32_t pid = 0;         // user resource: RES_PID when non-zero
  std::string kern_name;    // kernel resource: RES_KERN_NAME when non-empty
  uint64_t mr_bytes = 0;    // MRs
  bool old_layout = false;  // Linux 4.18-5.0: no CQN/MRN/PDN, no PDN/CTXN links
  // A user resource's links (Linux 5.1+): a QP's or MR's PD, a PD's or CQ's
  // device context; nullopt leaves the attribute out. The kernel links no
  // kernel resource.
  std::optional<uint32_t> pdn = 1, ctxn = 0;
  // QPs: enum ib_qp_type and ib_qp_state as ib_query_qp reports them; nullopt
  // leaves the attribute out, as a reply the parser must still take.
  std::optional<uint8_t> qp_type = 2;   // IB_QPT_RC
  std::optional<uint8_t> qp_state = 3;  // IB_QPS_RTS
};

inline KernelEntry UserEntry(uint32_t id, uint32_t pid, uint32_t port = 0, uint64_t mr_bytes = 0) {
  KernelEntry e;
  e.id = id;
  e.pid = pid;
  e.port = port;
  e.mr_bytes = mr_bytes;
  return e;
}

inline KernelEntry KernelEntryOf(uint32_t id, const std::string& kern_name, uint32_t port = 0) {
  KernelEntry e;
  e.id = id;
  e.kern_name = kern_name;
  e.port = port;
  return e;
}

// ib_core's GSI QP (QP1) of a port, as every device lists it.
inline KernelEntry GsiEntry(uint32_t port) {
  KernelEntry e = KernelEntryOf(1, "ib_core", port);
  e.qp_type = 1;  // IB_QPT_GSI
  return e;
}

// What the parser makes of an entry built by MessageBuilder: a QP is RC and
// RTS, ib_core's the GSI QP (KernelEntry's defaults, GsiEntry); a user QP or
// MR is in PD 1, a user PD or CQ in context 0.
inline RdmaResource Res(ResourceKind kind, const std::string& dev, uint32_t port, uint32_t id,
                        uint32_t pid, const std::string& kern = "", uint64_t mr_bytes = 0) {
  RdmaResource r;
  r.kind = kind;
  r.device = dev;
  r.port = port;
  r.id = id;
  r.pid = pid;
  r.kern_name = kern;
  r.mr_bytes = mr_bytes;
  if (kind == ResourceKind::kQp) {
    r.qp_type = kern == "ib_core" ? kQpTypeGsi : 2;  // GSI or RC
    r.qp_state = kQpStateRts;
  }
  if (kern.empty()) {
    if (kind == ResourceKind::kQp || kind == ResourceKind::kMr) r.pdn = 1;
    if (kind == ResourceKind::kPd || kind == ResourceKind::kCq) r.ctxn = 0;
  }
  return r;
}

// A netlink message under construction in an aligned buffer.
class MessageBuilder {
 public:
  MessageBuilder(uint16_t type, uint32_t seq, uint32_t portid, uint16_t flags = NLM_F_MULTI)
      : buf_(kBytes / sizeof(uint64_t)) {
    nlh_ = mnl_nlmsg_put_header(buf_.data());
    nlh_->nlmsg_type = type;
    nlh_->nlmsg_flags = flags;
    nlh_->nlmsg_seq = seq;
    nlh_->nlmsg_pid = portid;
  }
  nlmsghdr* nlh() { return nlh_; }
  std::string Bytes() const {
    return std::string(reinterpret_cast<const char*>(nlh_), nlh_->nlmsg_len);
  }

  // fill_nldev_handle
  void Handle(uint32_t dev_index, const std::string& dev_name) {
    mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_DEV_INDEX, dev_index);
    mnl_attr_put_strz(nlh_, RDMA_NLDEV_ATTR_DEV_NAME, dev_name.c_str());
  }

  // The table of one RES_*_GET reply, entries as fill_res_*_entry writes them.
  void Table(ResourceKind kind, const std::vector<KernelEntry>& entries) {
    nlattr* table = mnl_attr_nest_start(nlh_, TableAttr(kind));
    for (const KernelEntry& e : entries) Entry(kind, e);
    mnl_attr_nest_end(nlh_, table);
  }

  void Entry(ResourceKind kind, const KernelEntry& e) {
    nlattr* entry = mnl_attr_nest_start(nlh_, EntryAttr(kind));
    const bool kernel = !e.kern_name.empty();
    switch (kind) {
      case ResourceKind::kQp:
        if (e.port) mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_PORT_INDEX, e.port);
        mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_LQPN, e.id);
        if (!kernel && !e.old_layout && e.pdn) {
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_PDN, *e.pdn);
        }
        NamePid(e);
        // fill_res_qp_entry_query: the connected types' peer, then the rest.
        if (e.qp_type == 2 || e.qp_type == 3) {  // RC, UC
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_RQPN, e.id + 1);
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_RQ_PSN, 0x1234);
        }
        mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_SQ_PSN, 0x5678);
        if (e.qp_type == 2 || e.qp_type == 3 || e.qp_type == 10) {  // RC, UC, XRC_TGT
          mnl_attr_put_u8(nlh_, RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE, 3);
        }
        if (e.qp_type) mnl_attr_put_u8(nlh_, RDMA_NLDEV_ATTR_RES_TYPE, *e.qp_type);
        if (e.qp_state) mnl_attr_put_u8(nlh_, RDMA_NLDEV_ATTR_RES_STATE, *e.qp_state);
        break;
      case ResourceKind::kCq:
        mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_CQE, 256);
        mnl_attr_put_u64(nlh_, RDMA_NLDEV_ATTR_RES_USECNT, 1);
        if (kernel) mnl_attr_put_u8(nlh_, RDMA_NLDEV_ATTR_RES_POLL_CTX, 1);
        if (!e.old_layout) {
          mnl_attr_put_u8(nlh_, RDMA_NLDEV_ATTR_DEV_DIM, 0);
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_CQN, e.id);
          if (!kernel && e.ctxn) mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_CTXN, *e.ctxn);
        }
        NamePid(e);
        break;
      case ResourceKind::kMr:
        mnl_attr_put_u64(nlh_, RDMA_NLDEV_ATTR_RES_MRLEN, e.mr_bytes);
        if (!e.old_layout) {
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_MRN, e.id);
          if (!kernel && e.pdn) mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_PDN, *e.pdn);
        }
        NamePid(e);
        break;
      case ResourceKind::kPd:
        mnl_attr_put_u64(nlh_, RDMA_NLDEV_ATTR_RES_USECNT, 3);
        if (!e.old_layout) {
          mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_PDN, e.id);
          if (!kernel && e.ctxn) mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_CTXN, *e.ctxn);
        }
        NamePid(e);
        break;
      case ResourceKind::kCtx:
        // fill_res_ctx_entry. It skips a kernel context, of which there are
        // none (a ucontext is made by a process opening the device).
        mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_CTXN, e.id);
        NamePid(e);
        break;
    }
    mnl_attr_nest_end(nlh_, entry);
  }

  static uint16_t TableAttr(ResourceKind kind) {
    switch (kind) {
      case ResourceKind::kQp:
        return RDMA_NLDEV_ATTR_RES_QP;
      case ResourceKind::kCq:
        return RDMA_NLDEV_ATTR_RES_CQ;
      case ResourceKind::kMr:
        return RDMA_NLDEV_ATTR_RES_MR;
      case ResourceKind::kCtx:
        return RDMA_NLDEV_ATTR_RES_CTX;
      case ResourceKind::kPd:
        break;
    }
    return RDMA_NLDEV_ATTR_RES_PD;
  }
  static uint16_t EntryAttr(ResourceKind kind) { return TableAttr(kind) + 1; }

 private:
  static constexpr size_t kBytes = 64 * 1024;

  // fill_res_name_pid (Linux 5.5+: no RES_PID when the owner is not visible)
  void NamePid(const KernelEntry& e) {
    if (!e.kern_name.empty()) {
      mnl_attr_put_strz(nlh_, RDMA_NLDEV_ATTR_RES_KERN_NAME, e.kern_name.c_str());
    } else if (e.pid != 0) {
      mnl_attr_put_u32(nlh_, RDMA_NLDEV_ATTR_RES_PID, e.pid);
    }
  }

  std::vector<uint64_t> buf_;
  nlmsghdr* nlh_;
};

// One complete reply message of a RES_*_GET dump.
inline std::string ResourceMessage(ResourceKind kind, uint32_t dev_index,
                                   const std::string& dev_name,
                                   const std::vector<KernelEntry>& entries, uint32_t seq = 0,
                                   uint32_t portid = 0) {
  MessageBuilder m(wire::MessageType(kind), seq, portid);
  m.Handle(dev_index, dev_name);
  m.Table(kind, entries);
  return m.Bytes();
}

// A device message of the RDMA_NLDEV_CMD_GET dump (fill_dev_info's start).
inline std::string DeviceMessage(uint32_t dev_index, const std::string& dev_name, uint32_t seq = 0,
                                 uint32_t portid = 0) {
  MessageBuilder m(wire::DeviceListMessageType(), seq, portid);
  m.Handle(dev_index, dev_name);
  mnl_attr_put_u32(m.nlh(), RDMA_NLDEV_ATTR_PORT_INDEX, 1);
  mnl_attr_put_u64(m.nlh(), RDMA_NLDEV_ATTR_CAP_FLAGS, 0x1234);
  mnl_attr_put_u64(m.nlh(), RDMA_NLDEV_ATTR_NODE_GUID, 0x5054fffe123456ULL);
  mnl_attr_put_u8(m.nlh(), RDMA_NLDEV_ATTR_DEV_NODE_TYPE, 1);
  mnl_attr_put_strz(m.nlh(), RDMA_NLDEV_ATTR_DEV_PROTOCOL, "roce");
  return m.Bytes();
}

// NLMSG_DONE as netlink_dump writes it: an int payload, the dump's errno
// (negative) or 0.
inline std::string DoneMessage(int32_t error = 0, uint32_t seq = 0, uint32_t portid = 0) {
  MessageBuilder m(NLMSG_DONE, seq, portid);
  auto* p = static_cast<int32_t*>(mnl_nlmsg_put_extra_header(m.nlh(), sizeof(int32_t)));
  *p = error;
  return m.Bytes();
}

// NLMSG_ERROR (netlink_ack): the error and the request's header.
inline std::string ErrorMessage(int32_t error, uint32_t seq = 0, uint32_t portid = 0) {
  MessageBuilder m(NLMSG_ERROR, seq, portid, 0);
  auto* e = static_cast<nlmsgerr*>(mnl_nlmsg_put_extra_header(m.nlh(), sizeof(nlmsgerr)));
  e->error = error;
  e->msg.nlmsg_len = sizeof(nlmsghdr);
  e->msg.nlmsg_seq = seq;
  return m.Bytes();
}

}  // namespace fabric::restrack::testing

#endif  // FABRIC_TEST_FAKES_RESTRACK_TEST_UTIL_H_
