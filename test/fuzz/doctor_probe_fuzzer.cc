// The fabric doctor's probe message (agent/doctor/protocol.h), one libfabric
// message from any endpoint that can reach ours on the fabric.
// Input: the received message, as fabric_prober.cc hands it to DecodeProbe.
// Invariant: DecodeProbe never crashes and reads no byte past `len` (the
// input is copied to a buffer of exactly `len` bytes, so ASan sees an
// over-read); a message it accepts re-encodes (EncodeProbe) to exactly the
// same bytes and decodes again to the same ProbeMessage.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "agent/doctor/protocol.h"
#include "test/fuzz/fuzz_check.h"

namespace doctor = fabric::doctor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<char[]> exact(new char[size == 0 ? 1 : size]);
  if (size) std::memcpy(exact.get(), data, size);
  absl::StatusOr<doctor::ProbeMessage> m = doctor::DecodeProbe(exact.get(), size);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(size <= doctor::kMaxProbeMessage);
  FUZZ_CHECK(m->kind == doctor::ProbeKind::kProbe || m->kind == doctor::ProbeKind::kReply);
  FUZZ_CHECK(m->sender.size() <= doctor::kMaxEndpointName);
  char out[doctor::kMaxProbeMessage];
  const size_t n = doctor::EncodeProbe(*m, out);
  FUZZ_CHECK(n == size && std::memcmp(out, exact.get(), n) == 0);
  absl::StatusOr<doctor::ProbeMessage> back = doctor::DecodeProbe(out, n);
  FUZZ_CHECK(back.ok() && *back == *m);
  return 0;
}
