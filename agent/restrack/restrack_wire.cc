#include "agent/restrack/restrack_wire.h"

#include <libmnl/libmnl.h>
#include <rdma/rdma_netlink.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/utf8.h"

namespace fabric::restrack {

namespace wire {
namespace {

// The UAPI values are a stable ABI; pin the ones the parser depends on so a
// header mix-up fails the build rather than the parse.
static_assert(RDMA_NL_NLDEV == 5 && RDMA_NLDEV_CMD_GET == 1);
static_assert(RDMA_NLDEV_CMD_RES_QP_GET == 10 && RDMA_NLDEV_CMD_RES_CQ_GET == 12 &&
              RDMA_NLDEV_CMD_RES_MR_GET == 13 && RDMA_NLDEV_CMD_RES_PD_GET == 14);
static_assert(RDMA_NLDEV_ATTR_DEV_INDEX == 1 && RDMA_NLDEV_ATTR_DEV_NAME == 2 &&
              RDMA_NLDEV_ATTR_PORT_INDEX == 3);
static_assert(RDMA_NLDEV_ATTR_RES_QP == 19 && RDMA_NLDEV_ATTR_RES_QP_ENTRY == 20 &&
              RDMA_NLDEV_ATTR_RES_LQPN == 21 && RDMA_NLDEV_ATTR_RES_TYPE == 26 &&
              RDMA_NLDEV_ATTR_RES_STATE == 27 && RDMA_NLDEV_ATTR_RES_PID == 28 &&
              RDMA_NLDEV_ATTR_RES_KERN_NAME == 29);
static_assert(RDMA_NLDEV_ATTR_RES_CQ == 35 && RDMA_NLDEV_ATTR_RES_CQ_ENTRY == 36 &&
              RDMA_NLDEV_ATTR_RES_MR == 40 && RDMA_NLDEV_ATTR_RES_MR_ENTRY == 41 &&
              RDMA_NLDEV_ATTR_RES_MRLEN == 45 && RDMA_NLDEV_ATTR_RES_PD == 46 &&
              RDMA_NLDEV_ATTR_RES_PD_ENTRY == 47);
static_assert(RDMA_NLDEV_ATTR_RES_PDN == 60 && RDMA_NLDEV_ATTR_RES_CQN == 61 &&
              RDMA_NLDEV_ATTR_RES_MRN == 62 && RDMA_NLDEV_ATTR_RES_CTXN == 64);
static_assert(RDMA_NLDEV_CMD_RES_CTX_GET == 22 && RDMA_NLDEV_ATTR_RES_CTX == 86 &&
              RDMA_NLDEV_ATTR_RES_CTX_ENTRY == 87);

constexpr size_t kHeaderBytes = NLMSG_HDRLEN;    // 16
constexpr size_t kAttrHeaderBytes = NLA_HDRLEN;  // 4
constexpr size_t kMaxReasons = 8;

struct KindWire {
  int command;
  const char* command_name;
  uint16_t table;  // RES_QP
  uint16_t entry;  // RES_QP_ENTRY
  uint16_t id;     // RES_LQPN
};

KindWire Wire(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kQp:
      return {RDMA_NLDEV_CMD_RES_QP_GET, "RDMA_NLDEV_CMD_RES_QP_GET", RDMA_NLDEV_ATTR_RES_QP,
              RDMA_NLDEV_ATTR_RES_QP_ENTRY, RDMA_NLDEV_ATTR_RES_LQPN};
    case ResourceKind::kCq:
      return {RDMA_NLDEV_CMD_RES_CQ_GET, "RDMA_NLDEV_CMD_RES_CQ_GET", RDMA_NLDEV_ATTR_RES_CQ,
              RDMA_NLDEV_ATTR_RES_CQ_ENTRY, RDMA_NLDEV_ATTR_RES_CQN};
    case ResourceKind::kMr:
      return {RDMA_NLDEV_CMD_RES_MR_GET, "RDMA_NLDEV_CMD_RES_MR_GET", RDMA_NLDEV_ATTR_RES_MR,
              RDMA_NLDEV_ATTR_RES_MR_ENTRY, RDMA_NLDEV_ATTR_RES_MRN};
    case ResourceKind::kCtx:
      return {RDMA_NLDEV_CMD_RES_CTX_GET, "RDMA_NLDEV_CMD_RES_CTX_GET", RDMA_NLDEV_ATTR_RES_CTX,
              RDMA_NLDEV_ATTR_RES_CTX_ENTRY, RDMA_NLDEV_ATTR_RES_CTXN};
    case ResourceKind::kPd:
      break;
  }
  return {RDMA_NLDEV_CMD_RES_PD_GET, "RDMA_NLDEV_CMD_RES_PD_GET", RDMA_NLDEV_ATTR_RES_PD,
          RDMA_NLDEV_ATTR_RES_PD_ENTRY, RDMA_NLDEV_ATTR_RES_PDN};
}

// RDMA_NL_GET_TYPE(client, op)
constexpr uint16_t NlType(int op) { return static_cast<uint16_t>((RDMA_NL_NLDEV << 10) + op); }

std::string AttrName(uint16_t type) {
  switch (type) {
    case RDMA_NLDEV_ATTR_DEV_INDEX:
      return "RDMA_NLDEV_ATTR_DEV_INDEX";
    case RDMA_NLDEV_ATTR_DEV_NAME:
      return "RDMA_NLDEV_ATTR_DEV_NAME";
    case RDMA_NLDEV_ATTR_PORT_INDEX:
      return "RDMA_NLDEV_ATTR_PORT_INDEX";
    case RDMA_NLDEV_ATTR_RES_LQPN:
      return "RDMA_NLDEV_ATTR_RES_LQPN";
    case RDMA_NLDEV_ATTR_RES_CQN:
      return "RDMA_NLDEV_ATTR_RES_CQN";
    case RDMA_NLDEV_ATTR_RES_MRN:
      return "RDMA_NLDEV_ATTR_RES_MRN";
    case RDMA_NLDEV_ATTR_RES_PDN:
      return "RDMA_NLDEV_ATTR_RES_PDN";
    case RDMA_NLDEV_ATTR_RES_CTXN:
      return "RDMA_NLDEV_ATTR_RES_CTXN";
    case RDMA_NLDEV_ATTR_RES_PID:
      return "RDMA_NLDEV_ATTR_RES_PID";
    case RDMA_NLDEV_ATTR_RES_KERN_NAME:
      return "RDMA_NLDEV_ATTR_RES_KERN_NAME";
    case RDMA_NLDEV_ATTR_RES_MRLEN:
      return "RDMA_NLDEV_ATTR_RES_MRLEN";
    case RDMA_NLDEV_ATTR_RES_TYPE:
      return "RDMA_NLDEV_ATTR_RES_TYPE";
    case RDMA_NLDEV_ATTR_RES_STATE:
      return "RDMA_NLDEV_ATTR_RES_STATE";
    case RDMA_NLDEV_ATTR_RES_QP:
      return "RDMA_NLDEV_ATTR_RES_QP";
    case RDMA_NLDEV_ATTR_RES_CQ:
      return "RDMA_NLDEV_ATTR_RES_CQ";
    case RDMA_NLDEV_ATTR_RES_MR:
      return "RDMA_NLDEV_ATTR_RES_MR";
    case RDMA_NLDEV_ATTR_RES_PD:
      return "RDMA_NLDEV_ATTR_RES_PD";
    case RDMA_NLDEV_ATTR_RES_CTX:
      return "RDMA_NLDEV_ATTR_RES_CTX";
    default:
      return absl::StrCat("attribute ", type);
  }
}

absl::Status Malformed(absl::string_view what, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat(what, " reply: ", detail));
}

struct Attr {
  uint16_t type = 0;  // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
  absl::string_view payload;
  size_t offset = 0;  // of the attribute header, from the message start
};

// Walks the attributes of `block` (which starts at `block_offset` in the
// message). Every header must fit, every length must stay inside the block;
// only the last attribute may omit its alignment padding, as the kernel's
// nla_parse accepts; bytes left over that do not form an attribute are
// malformed.
absl::Status WalkAttrs(absl::string_view block, size_t block_offset, absl::string_view what,
                       absl::FunctionRef<absl::Status(const Attr&)> fn) {
  size_t pos = 0;
  while (block.size() - pos >= kAttrHeaderBytes) {
    uint16_t len = 0;
    uint16_t type = 0;
    std::memcpy(&len, block.data() + pos, sizeof(len));
    std::memcpy(&type, block.data() + pos + sizeof(len), sizeof(type));
    const size_t remain = block.size() - pos;
    if (len < kAttrHeaderBytes) {
      return Malformed(what, absl::StrFormat("attribute at byte %d has length %d, less than its "
                                             "4-byte header",
                                             block_offset + pos, len));
    }
    if (len > remain) {
      return Malformed(
          what, absl::StrFormat("%s at byte %d claims %d bytes but only %d remain in "
                                "its parent (truncated)",
                                AttrName(type & NLA_TYPE_MASK), block_offset + pos, len, remain));
    }
    Attr attr;
    attr.type = type & NLA_TYPE_MASK;
    attr.payload = block.substr(pos + kAttrHeaderBytes, len - kAttrHeaderBytes);
    attr.offset = block_offset + pos;
    absl::Status st = fn(attr);
    if (!st.ok()) return st;
    const size_t step = NLA_ALIGN(len);
    if (step >= remain) return absl::OkStatus();
    pos += step;
  }
  if (pos != block.size()) {
    return Malformed(what, absl::StrFormat("%d stray bytes at byte %d that are not an attribute",
                                           block.size() - pos, block_offset + pos));
  }
  return absl::OkStatus();
}

absl::Status WrongSize(absl::string_view what, const Attr& a, size_t want) {
  return Malformed(what, absl::StrFormat("%s at byte %d has %d payload bytes, expected %d",
                                         AttrName(a.type), a.offset, a.payload.size(), want));
}

absl::Status GetU8(absl::string_view what, const Attr& a, std::optional<uint8_t>* out) {
  if (a.payload.size() != sizeof(uint8_t)) return WrongSize(what, a, sizeof(uint8_t));
  *out = static_cast<uint8_t>(a.payload[0]);
  return absl::OkStatus();
}

absl::Status GetU32(absl::string_view what, const Attr& a, uint32_t* out) {
  if (a.payload.size() != sizeof(uint32_t)) return WrongSize(what, a, sizeof(uint32_t));
  std::memcpy(out, a.payload.data(), sizeof(uint32_t));
  return absl::OkStatus();
}

absl::Status GetU64(absl::string_view what, const Attr& a, uint64_t* out) {
  if (a.payload.size() != sizeof(uint64_t)) return WrongSize(what, a, sizeof(uint64_t));
  std::memcpy(out, a.payload.data(), sizeof(uint64_t));
  return absl::OkStatus();
}

// NLA_NUL_STRING: the value ends at the first NUL, which must be inside.
absl::Status GetString(absl::string_view what, const Attr& a, std::string* out) {
  const size_t nul = a.payload.find('\0');
  if (nul == absl::string_view::npos) {
    return Malformed(
        what, absl::StrFormat("%s at byte %d is not NUL-terminated", AttrName(a.type), a.offset));
  }
  out->assign(a.payload.data(), nul);
  return absl::OkStatus();
}

absl::Status Duplicate(absl::string_view what, const Attr& a) {
  return Malformed(what, absl::StrFormat("%s repeated at byte %d", AttrName(a.type), a.offset));
}

// The netlink header of one message: its attributes, after checking its
// length and type.
absl::Status OpenMessage(absl::string_view message, uint16_t expected_type, absl::string_view what,
                         absl::string_view* attrs) {
  if (message.size() < kHeaderBytes) {
    return Malformed(what, absl::StrFormat("message of %d bytes is shorter than a netlink header",
                                           message.size()));
  }
  nlmsghdr h;
  std::memcpy(&h, message.data(), sizeof(h));
  if (h.nlmsg_len < kHeaderBytes || h.nlmsg_len > message.size()) {
    return Malformed(
        what, absl::StrFormat("message length %d outside [16, %d]", h.nlmsg_len, message.size()));
  }
  if (h.nlmsg_type != expected_type) {
    return Malformed(
        what, absl::StrFormat("message type 0x%04x, expected 0x%04x", h.nlmsg_type, expected_type));
  }
  *attrs = message.substr(kHeaderBytes, h.nlmsg_len - kHeaderBytes);
  return absl::OkStatus();
}

// The device handle every nldev reply starts with (fill_nldev_handle).
struct Handle {
  bool has_index = false, has_name = false;
  uint32_t index = 0;
  std::string name;
};

absl::Status TakeHandleAttr(absl::string_view what, const Attr& a, Handle* h) {
  if (a.type == RDMA_NLDEV_ATTR_DEV_INDEX) {
    if (h->has_index) return Duplicate(what, a);
    h->has_index = true;
    return GetU32(what, a, &h->index);
  }
  if (a.type == RDMA_NLDEV_ATTR_DEV_NAME) {
    if (h->has_name) return Duplicate(what, a);
    h->has_name = true;
    return GetString(what, a, &h->name);
  }
  return absl::OkStatus();
}

absl::Status CheckHandle(absl::string_view what, const Handle& h) {
  if (!h.has_index) return Malformed(what, "no RDMA_NLDEV_ATTR_DEV_INDEX");
  if (!h.has_name) return Malformed(what, "no RDMA_NLDEV_ATTR_DEV_NAME");
  return absl::OkStatus();
}

absl::Status CheckDeviceName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("RDMA device name is empty");
  return CheckExternalName("RDMA device name", name, kMaxNameBytes);
}

// One *_ENTRY nest: the fields of RdmaResource, each at most once.
absl::Status ParseEntry(absl::string_view what, ResourceKind kind, uint16_t id_attr,
                        const Attr& entry, RdmaResource* out) {
  bool port = false, id = false, pid = false, kern = false, mrlen = false, type = false,
       state = false, pdn = false, ctxn = false;
  // The links to a resource's PD (QPs, MRs) and device context (PDs, CQs);
  // for a PD and a context their own number is the id.
  const bool has_pd = kind == ResourceKind::kQp || kind == ResourceKind::kMr;
  const bool has_ctx = kind == ResourceKind::kPd || kind == ResourceKind::kCq;
  absl::Status st = WalkAttrs(
      entry.payload, entry.offset + kAttrHeaderBytes, what, [&](const Attr& a) -> absl::Status {
        auto once = [&](bool* seen) {
          if (*seen) return Duplicate(what, a);
          *seen = true;
          return absl::OkStatus();
        };
        absl::Status s;
        if (a.type == RDMA_NLDEV_ATTR_PORT_INDEX && kind == ResourceKind::kQp) {
          if (s = once(&port); !s.ok()) return s;
          return GetU32(what, a, &out->port);
        }
        if (a.type == id_attr) {
          if (s = once(&id); !s.ok()) return s;
          return GetU32(what, a, &out->id);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_PID) {
          if (s = once(&pid); !s.ok()) return s;
          return GetU32(what, a, &out->pid);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_KERN_NAME) {
          if (s = once(&kern); !s.ok()) return s;
          return GetString(what, a, &out->kern_name);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_MRLEN && kind == ResourceKind::kMr) {
          if (s = once(&mrlen); !s.ok()) return s;
          return GetU64(what, a, &out->mr_bytes);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_TYPE && kind == ResourceKind::kQp) {
          if (s = once(&type); !s.ok()) return s;
          return GetU8(what, a, &out->qp_type);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_STATE && kind == ResourceKind::kQp) {
          if (s = once(&state); !s.ok()) return s;
          return GetU8(what, a, &out->qp_state);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_PDN && has_pd) {
          if (s = once(&pdn); !s.ok()) return s;
          out->pdn.emplace();
          return GetU32(what, a, &*out->pdn);
        }
        if (a.type == RDMA_NLDEV_ATTR_RES_CTXN && has_ctx) {
          if (s = once(&ctxn); !s.ok()) return s;
          out->ctxn.emplace();
          return GetU32(what, a, &*out->ctxn);
        }
        return absl::OkStatus();  // PSNs, keys, driver details...
      });
  if (!st.ok()) return st;
  if (pid && kern) {
    return Malformed(what, absl::StrFormat("entry at byte %d has both RDMA_NLDEV_ATTR_RES_PID and "
                                           "RDMA_NLDEV_ATTR_RES_KERN_NAME",
                                           entry.offset));
  }
  if (kern) {
    // The kernel links only user resources (nldev.c: !rdma_is_kernel_res);
    // a kernel resource's owner is its kern_name, never a link.
    out->pdn.reset();
    out->ctxn.reset();
  }
  return absl::OkStatus();
}

// Shared by the ERROR / DONE callbacks and FeedBuffer.
struct FeedContext {
  MessageSink* sink = nullptr;
  absl::string_view what;
  absl::Status error;
  int kernel_errno = 0;
  bool done = false;
};

// A negative errno from the kernel as a positive one; 0 when the value is not
// an errno the kernel could send.
int PositiveErrno(int32_t value) {
  if (value >= 0 || value == INT32_MIN) return 0;
  return -value;
}

int OnData(const nlmsghdr* nlh, void* data) {
  auto* ctx = static_cast<FeedContext*>(data);
  ctx->error =
      ctx->sink->OnMessage(absl::string_view(reinterpret_cast<const char*>(nlh), nlh->nlmsg_len));
  return ctx->error.ok() ? MNL_CB_OK : MNL_CB_ERROR;
}

int OnError(const nlmsghdr* nlh, void* data) {
  auto* ctx = static_cast<FeedContext*>(data);
  if (nlh->nlmsg_len < kHeaderBytes + sizeof(nlmsgerr)) {
    ctx->error = Malformed(ctx->what,
                           absl::StrFormat("NLMSG_ERROR of %d bytes is too short", nlh->nlmsg_len));
    return MNL_CB_ERROR;
  }
  int32_t value = 0;
  std::memcpy(&value, reinterpret_cast<const char*>(nlh) + kHeaderBytes, sizeof(value));
  if (value == 0) {  // an acknowledgement: nothing more follows
    ctx->done = true;
    return MNL_CB_STOP;
  }
  ctx->kernel_errno = PositiveErrno(value);
  if (ctx->kernel_errno == 0) {
    ctx->error =
        Malformed(ctx->what, absl::StrFormat("NLMSG_ERROR carries %d, not an errno", value));
  }
  return MNL_CB_ERROR;
}

int OnDone(const nlmsghdr* nlh, void* data) {
  auto* ctx = static_cast<FeedContext*>(data);
  // Since Linux 4.14 a dump that failed says why in NLMSG_DONE's payload.
  if (nlh->nlmsg_len >= kHeaderBytes + sizeof(int32_t)) {
    int32_t value = 0;
    std::memcpy(&value, reinterpret_cast<const char*>(nlh) + kHeaderBytes, sizeof(value));
    if (value < 0) {
      ctx->kernel_errno = PositiveErrno(value);
      if (ctx->kernel_errno == 0) {
        ctx->error =
            Malformed(ctx->what, absl::StrFormat("NLMSG_DONE carries %d, not an errno", value));
      }
      return MNL_CB_ERROR;
    }
  }
  ctx->done = true;
  return MNL_CB_STOP;
}

}  // namespace

const char* CommandName(ResourceKind kind) { return Wire(kind).command_name; }
uint16_t MessageType(ResourceKind kind) { return NlType(Wire(kind).command); }
uint16_t DeviceListMessageType() { return NlType(RDMA_NLDEV_CMD_GET); }

nlmsghdr* PutDeviceListDump(char* buf) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = DeviceListMessageType();
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  return nlh;
}

nlmsghdr* PutResourceDump(char* buf, ResourceKind kind, uint32_t dev_index) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = MessageType(kind);
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_DEV_INDEX, dev_index);
  return nlh;
}

std::string ErrnoName(int errno_value) {
  const char* name = ::strerrorname_np(errno_value);
  if (name == nullptr) return absl::StrCat("errno ", errno_value);
  return name;
}

absl::Status KernelErrorStatus(int errno_value, absl::string_view request) {
  const char* desc = ::strerrordesc_np(errno_value);
  std::string message = absl::StrCat(request, ": the kernel answered ", ErrnoName(errno_value),
                                     " (", desc ? desc : "unknown error", ")");
  if (errno_value == EOPNOTSUPP) {
    return absl::UnimplementedError(
        absl::StrCat(message, "; this kernel or driver does not track these resources"));
  }
  return absl::Status(absl::ErrnoToStatusCode(errno_value), message);
}

absl::Status DeviceListParser::OnMessage(absl::string_view message) {
  const absl::string_view kWhat = what_;
  absl::string_view attrs;
  absl::Status st = OpenMessage(message, DeviceListMessageType(), kWhat, &attrs);
  if (!st.ok()) return st;
  Handle h;
  st = WalkAttrs(attrs, kHeaderBytes, kWhat,
                 [&](const Attr& a) { return TakeHandleAttr(kWhat, a, &h); });
  if (!st.ok()) return st;
  st = CheckHandle(kWhat, h);
  if (!st.ok()) return st;
  if (devices_.size() >= kMaxDevices) {
    return absl::ResourceExhaustedError(absl::StrCat(kWhat, " dump: more than ", kMaxDevices,
                                                     " devices; refusing it (a sanity bound)"));
  }
  devices_.push_back({h.index, std::move(h.name)});
  return absl::OkStatus();
}

ResourceDumpParser::ResourceDumpParser(ResourceKind kind,
                                       std::optional<uint32_t> expected_dev_index,
                                       size_t max_entries, std::string what)
    : kind_(kind),
      expected_dev_index_(expected_dev_index),
      what_(what.empty() ? std::string(Wire(kind).command_name) : std::move(what)),
      max_entries_(max_entries) {}

absl::Status ResourceDumpParser::OnMessage(absl::string_view message) {
  const KindWire w = Wire(kind_);
  const absl::string_view what = what_;
  if (++messages_ > kMaxMessagesPerDump) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " dump: more than ", kMaxMessagesPerDump,
                                                     " messages; refusing it (a sanity bound)"));
  }
  absl::string_view attrs;
  absl::Status st = OpenMessage(message, MessageType(kind_), what, &attrs);
  if (!st.ok()) return st;

  Handle h;
  std::optional<Attr> table;
  st = WalkAttrs(attrs, kHeaderBytes, what, [&](const Attr& a) -> absl::Status {
    if (a.type == w.table) {
      if (table) return Duplicate(what, a);
      table = a;
      return absl::OkStatus();
    }
    return TakeHandleAttr(what, a, &h);
  });
  if (!st.ok()) return st;
  st = CheckHandle(what, h);
  if (!st.ok()) return st;
  if (expected_dev_index_ && h.index != *expected_dev_index_) {
    return Malformed(what, absl::StrFormat("answers for device index %d, the request named %d",
                                           h.index, *expected_dev_index_));
  }
  if (!table) return absl::OkStatus();  // a device with nothing of this kind

  const absl::Status device_clean = CheckDeviceName(h.name);
  auto reject = [&](const absl::Status& why) {
    ++rejected_;
    if (reasons_.size() < kMaxReasons) {
      reasons_.push_back(absl::StrCat(what, " entry dropped: ", why.message()));
    }
  };
  return WalkAttrs(
      table->payload, table->offset + kAttrHeaderBytes, what, [&](const Attr& a) -> absl::Status {
        if (a.type != w.entry) return absl::OkStatus();  // not an entry: a newer kernel's
        if (++entries_seen_ > max_entries_) {
          return absl::ResourceExhaustedError(
              absl::StrCat(what, " dump: more than ", max_entries_,
                           " entries; refusing it (a sanity bound, not a kernel limit)"));
        }
        RdmaResource r;
        r.kind = kind_;
        absl::Status s = ParseEntry(what, kind_, w.id, a, &r);
        if (!s.ok()) return s;
        if (!device_clean.ok()) {
          reject(device_clean);
          return absl::OkStatus();
        }
        if (absl::Status k = CheckExternalName("kernel owner name", r.kern_name, kMaxNameBytes);
            !k.ok()) {
          reject(k);
          return absl::OkStatus();
        }
        r.device = h.name;
        resources_.push_back(std::move(r));
        return absl::OkStatus();
      });
}

FeedResult FeedBuffer(absl::string_view buffer, uint32_t seq, uint32_t portid, MessageSink& sink,
                      absl::string_view what) {
  FeedResult result;
  if (buffer.empty()) return result;  // nothing yet: the dump goes on
  auto fail = [&](absl::Status st) {
    result.state = FeedResult::State::kFailed;
    result.error = std::move(st);
    return result;
  };
  // libmnl's loop stops quietly at a message that does not fit (and reads a
  // length past INT_MAX as negative); check the framing first.
  for (size_t pos = 0; pos < buffer.size();) {
    const size_t remain = buffer.size() - pos;
    if (remain < kHeaderBytes) {
      return fail(Malformed(
          what, absl::StrFormat("%d stray bytes after the last message at byte %d", remain, pos)));
    }
    uint32_t len = 0;
    std::memcpy(&len, buffer.data() + pos, sizeof(len));
    if (len < kHeaderBytes || len > remain) {
      return fail(Malformed(what, absl::StrFormat("message at byte %d claims %d bytes, %d remain",
                                                  pos, len, remain)));
    }
    const size_t step = NLMSG_ALIGN(len);
    if (step >= remain) break;
    pos += step;
  }
  // libmnl reads headers in place: give it an aligned copy when needed.
  std::vector<uint32_t> aligned;
  const char* data = buffer.data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(nlmsghdr) != 0) {
    aligned.resize((buffer.size() + sizeof(uint32_t) - 1) / sizeof(uint32_t));
    std::memcpy(aligned.data(), buffer.data(), buffer.size());
    data = reinterpret_cast<const char*>(aligned.data());
  }

  FeedContext ctx;
  ctx.sink = &sink;
  ctx.what = what;
  mnl_cb_t control[NLMSG_MIN_TYPE] = {};
  control[NLMSG_ERROR] = OnError;
  control[NLMSG_DONE] = OnDone;
  errno = 0;
  const int ret =
      mnl_cb_run2(data, buffer.size(), seq, portid, OnData, &ctx, control, NLMSG_MIN_TYPE);
  const int err = errno;
  if (ret >= MNL_CB_OK) return result;  // kMore
  if (ret == MNL_CB_STOP) {
    result.state = FeedResult::State::kDone;
    return result;
  }
  if (!ctx.error.ok()) return fail(std::move(ctx.error));
  if (ctx.kernel_errno != 0) {
    result.state = FeedResult::State::kKernelError;
    result.kernel_errno = ctx.kernel_errno;
    return result;
  }
  switch (err) {
    case EINTR:  // NLM_F_DUMP_INTR
      result.state = FeedResult::State::kInterrupted;
      return result;
    case ESRCH:
      return fail(
          Malformed(what, absl::StrCat("a message from another netlink port than ", portid)));
    case EPROTO:
      return fail(
          Malformed(what, absl::StrCat("a message for another request than sequence ", seq)));
    default:
      return fail(Malformed(what, absl::StrCat("libmnl refused the buffer: ", ErrnoName(err))));
  }
}

}  // namespace wire
}  // namespace fabric::restrack
