#include "agent/doctor/protocol.h"

#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "agent/base/utf8.h"

namespace fabric::doctor {
namespace {

constexpr char kControlMagic[4] = {'F', 'D', 'O', 'C'};
constexpr char kProbeMagic[4] = {'F', 'D', 'P', 'B'};

void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void PutU16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
bool PutString(std::string& out, const std::string& s, size_t max) {
  if (s.size() > max) return false;
  PutU16(out, static_cast<uint16_t>(s.size()));
  out.append(s);
  return true;
}

class Reader {
 public:
  Reader(const char* data, size_t len) : p_(reinterpret_cast<const uint8_t*>(data)), left_(len) {}
  bool U8(uint8_t& v) {
    if (left_ < 1) return false;
    v = *p_++;
    --left_;
    return true;
  }
  bool U16(uint16_t& v) {
    if (left_ < 2) return false;
    v = static_cast<uint16_t>((p_[0] << 8) | p_[1]);
    p_ += 2;
    left_ -= 2;
    return true;
  }
  bool U64(uint64_t& v) {
    if (left_ < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | p_[i];
    p_ += 8;
    left_ -= 8;
    return true;
  }
  bool Bytes(size_t n, std::string& out) {
    if (left_ < n) return false;
    out.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return true;
  }
  bool String(size_t max, std::string& out) {
    uint16_t n = 0;
    return U16(n) && n <= max && Bytes(n, out);
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

absl::Status Garbage(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed control message: ", what));
}

// Marks a decode error as a name that is not clean text (ControlRejectReason).
constexpr char kReasonPayload[] = "type.fabric/doctor.control_reject_reason";

absl::Status CheckName(absl::string_view what, absl::string_view s) {
  absl::Status st = CheckExternalName(what, s, kMaxNameLength);
  if (st.ok()) return st;
  absl::Status out = absl::InvalidArgumentError(absl::StrCat("control message: ", st.message()));
  out.SetPayload(kReasonPayload, absl::Cord("control_bad_name"));
  return out;
}

absl::Status CheckInfoNames(const NodeInfo& info) {
  if (absl::Status s = CheckName("node name", info.node); !s.ok()) return s;
  for (const DeviceEndpoint& d : info.devices) {
    if (absl::Status s = CheckName("device name", d.device); !s.ok()) return s;
    if (absl::Status s = CheckName("provider name", d.provider); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeControl(const ControlMessage& m) {
  std::string out(kControlMagic, 4);
  PutU8(out, kProtocolVersion);
  PutU8(out, static_cast<uint8_t>(m.type));
  if (m.type == ControlType::kError) {
    if (absl::Status s = CheckName("error text", m.error); !s.ok()) return s;
    if (!PutString(out, m.error, kMaxNameLength)) {
      return absl::InvalidArgumentError("error message too long");
    }
    return out;
  }
  if (m.info.devices.size() > kMaxDevices) return absl::InvalidArgumentError("too many devices");
  if (absl::Status s = CheckInfoNames(m.info); !s.ok()) return s;
  if (!PutString(out, m.info.node, kMaxNameLength)) {
    return absl::InvalidArgumentError("node name too long");
  }
  PutU64(out, m.info.instance);
  PutU16(out, static_cast<uint16_t>(m.info.devices.size()));
  for (const DeviceEndpoint& d : m.info.devices) {
    if (!PutString(out, d.device, kMaxNameLength) || !PutString(out, d.provider, kMaxNameLength) ||
        !PutString(out, d.name, kMaxEndpointName)) {
      return absl::InvalidArgumentError(absl::StrCat("device ", d.device, ": field too long"));
    }
  }
  if (out.size() > kMaxControlFrame) return absl::InvalidArgumentError("message too long");
  return out;
}

absl::StatusOr<ControlMessage> DecodeControl(const std::string& payload) {
  if (payload.size() > kMaxControlFrame) return Garbage("too long");
  Reader r(payload.data(), payload.size());
  std::string magic;
  uint8_t version = 0, type = 0;
  if (!r.Bytes(4, magic) || std::memcmp(magic.data(), kControlMagic, 4) != 0) {
    return Garbage("bad magic");
  }
  if (!r.U8(version)) return Garbage("truncated");
  if (version != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "control protocol version ", version, " (this agent speaks ", kProtocolVersion, ")"));
  }
  if (!r.U8(type)) return Garbage("truncated");
  ControlMessage m;
  switch (type) {
    case static_cast<uint8_t>(ControlType::kError):
      m.type = ControlType::kError;
      if (!r.String(kMaxNameLength, m.error)) return Garbage("error text");
      if (absl::Status s = CheckName("error text", m.error); !s.ok()) return s;
      break;
    case static_cast<uint8_t>(ControlType::kQuery):
    case static_cast<uint8_t>(ControlType::kInfo): {
      m.type = static_cast<ControlType>(type);
      uint16_t count = 0;
      if (!r.String(kMaxNameLength, m.info.node) || m.info.node.empty()) return Garbage("node");
      if (!r.U64(m.info.instance) || !r.U16(count)) return Garbage("truncated");
      if (count > kMaxDevices) return Garbage("too many devices");
      for (uint16_t i = 0; i < count; ++i) {
        DeviceEndpoint d;
        if (!r.String(kMaxNameLength, d.device) || !r.String(kMaxNameLength, d.provider) ||
            !r.String(kMaxEndpointName, d.name) || d.device.empty() || d.name.empty()) {
          return Garbage("device entry");
        }
        m.info.devices.push_back(std::move(d));
      }
      break;
    }
    default:
      return Garbage("unknown type");
  }
  if (r.left() != 0) return Garbage("trailing bytes");
  // Checked after the structure, so a frame that is both is garbage first.
  if (m.type != ControlType::kError) {
    if (absl::Status s = CheckInfoNames(m.info); !s.ok()) return s;
  }
  return m;
}

std::string ControlRejectReason(const absl::Status& decode_error) {
  if (absl::IsFailedPrecondition(decode_error)) return "control_version";
  if (auto p = decode_error.GetPayload(kReasonPayload); p.has_value()) return std::string(*p);
  return "control_garbage";
}

std::string Frame(const std::string& payload) {
  std::string out;
  uint32_t n = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(payload);
  return out;
}

size_t EncodeProbe(const ProbeMessage& m, char* out) {
  std::string s(kProbeMagic, 4);
  PutU8(s, kProtocolVersion);
  PutU8(s, static_cast<uint8_t>(m.kind));
  size_t n = std::min(m.sender.size(), kMaxEndpointName);
  PutU16(s, static_cast<uint16_t>(n));
  PutU64(s, m.nonce);
  s.append(m.sender.data(), n);
  std::memcpy(out, s.data(), s.size());
  return s.size();
}

absl::StatusOr<ProbeMessage> DecodeProbe(const char* data, size_t len) {
  if (len < kProbeHeader || len > kMaxProbeMessage) {
    return absl::InvalidArgumentError("probe: bad length");
  }
  if (std::memcmp(data, kProbeMagic, 4) != 0) return absl::InvalidArgumentError("probe: magic");
  Reader r(data + 4, len - 4);
  uint8_t version = 0, kind = 0;
  uint16_t n = 0;
  ProbeMessage m;
  r.U8(version);
  r.U8(kind);
  r.U16(n);
  r.U64(m.nonce);
  if (version != kProtocolVersion) return absl::InvalidArgumentError("probe: version");
  if (kind != 1 && kind != 2) return absl::InvalidArgumentError("probe: kind");
  m.kind = static_cast<ProbeKind>(kind);
  if (n > kMaxEndpointName || r.left() != n || !r.Bytes(n, m.sender)) {
    return absl::InvalidArgumentError("probe: name length");
  }
  return m;
}

}  // namespace fabric::doctor
