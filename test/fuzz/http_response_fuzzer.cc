// What the agent's HTTP client reads from a server (agent/http/response.h):
// the API server's answers, or anything that answers on its address.
// Input: the bytes a server sent: the head is what comes before the first
// "\r\n\r\n", the rest is fed to the chunked decoder; the first input byte
// also picks the split of the body into pieces.
// Invariant: ParseResponseHead never crashes and gives either an error or a
// status 100..999 with a length that is -1 or >= 0 (-1 when chunked); the
// chunked decoder gives the same body, the same end and the same verdict
// however the bytes are split, never more body bytes than it was fed, and
// stays failed once it failed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "agent/http/response.h"
#include "test/fuzz/fuzz_check.h"

namespace {

struct Decoded {
  bool ok = true;
  bool done = false;
  size_t used = 0;
  std::string body;
};

Decoded Decode(const std::string& wire, size_t step) {
  fabric::ChunkedDecoder d;
  Decoded out;
  while (out.used < wire.size() && !d.done()) {
    const std::string piece = wire.substr(out.used, step);
    auto used = d.Feed(piece, &out.body);
    if (!used.ok()) {
      out.ok = false;
      std::string more;
      FUZZ_CHECK(!d.Feed("0\r\n\r\n", &more).ok());  // failed stays failed
      return out;
    }
    FUZZ_CHECK(*used <= piece.size());
    out.used += *used;
    if (*used < piece.size()) FUZZ_CHECK(d.done());
  }
  out.done = d.done();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = 1 + data[0] % 17;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t end = in.find("\r\n\r\n");
  auto head = fabric::ParseResponseHead(absl::string_view(in).substr(0, end));
  if (head.ok()) {
    FUZZ_CHECK(head->status >= 100 && head->status <= 999);
    FUZZ_CHECK(head->content_length >= -1);
    FUZZ_CHECK(!head->chunked || head->content_length == -1);
  } else {
    FUZZ_CHECK(head.status().code() == absl::StatusCode::kDataLoss);
  }
  const std::string body = end == std::string::npos ? in : in.substr(end + 4);
  const Decoded whole = Decode(body, body.size() + 1);
  const Decoded split = Decode(body, step);
  FUZZ_CHECK(whole.ok == split.ok);
  if (whole.ok) {
    FUZZ_CHECK(whole.done == split.done);
    FUZZ_CHECK(whole.body == split.body);
    FUZZ_CHECK(whole.used == split.used);
    FUZZ_CHECK(whole.body.size() <= whole.used);
  }
  return 0;
}
