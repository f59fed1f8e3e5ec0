// The fabric doctor's control-channel payload (agent/doctor/protocol.h), the
// bytes a peer agent (or anything that can reach the doctor's TCP port) sends.
// Input: one payload, without the 4-byte length prefix (control.cc strips it
// after checking it against kMaxControlFrame).
// Invariant: DecodeControl never throws or crashes; it fails only with
// kInvalidArgument (garbage) or kFailedPrecondition (another version); a
// payload it accepts re-encodes (EncodeControl) to exactly the same bytes, so
// the format has one encoding per message and nothing decoded is lost, and
// the re-encoded payload decodes to the same message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/doctor/protocol.h"
#include "test/fuzz/fuzz_check.h"

namespace doctor = fabric::doctor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<doctor::ControlMessage> m = doctor::DecodeControl(payload);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument ||
               m.status().code() == absl::StatusCode::kFailedPrecondition);
    return 0;
  }
  FUZZ_CHECK(payload.size() <= doctor::kMaxControlFrame);
  FUZZ_CHECK(m->info.devices.size() <= doctor::kMaxDevices);
  absl::StatusOr<std::string> again = doctor::EncodeControl(*m);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == payload);
  absl::StatusOr<doctor::ControlMessage> back = doctor::DecodeControl(*again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(back->type == m->type && back->info == m->info && back->error == m->error);
  const std::string framed = doctor::Frame(payload);
  FUZZ_CHECK(framed.size() == payload.size() + 4 &&
             framed.compare(4, payload.size(), payload) == 0);
  return 0;
}
