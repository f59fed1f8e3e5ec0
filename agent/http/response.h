// HTTP/1.1 on the wire, the halves request.h does not have: the response head
// the server writes, the request head the client writes, the response head
// and chunked body the client reads (pure functions of the peer's bytes,
// fuzzed by test/fuzz/http_response_fuzzer.cc), and query escaping.
#ifndef FABRIC_AGENT_HTTP_RESPONSE_H_
#define FABRIC_AGENT_HTTP_RESPONSE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric {

// What a route answers: a status, a content type and a body (the server core
// writes the head; HEAD requests get the head only).
struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// "OK", "Not Found", ... ("Error" for a status without a text here).
const char* HttpStatusText(int status);

// The head of a one-request connection's answer: status line, Content-Type,
// Content-Length, "Connection: close", and the header a status requires
// (401: WWW-Authenticate: Bearer; 405: Allow: GET, HEAD).
std::string WriteResponseHead(int status, absl::string_view content_type, size_t content_length);

// A request head for `host` (the Host header: "name[:port]"), with
// Content-Length when `body_length` >= 0, then `headers`.
std::string WriteRequestHead(absl::string_view method, absl::string_view target,
                             absl::string_view host, const HttpHeaders& headers,
                             int64_t body_length);

// The parts of a response head the client acts on.
struct HttpResponseHead {
  int status = 0;
  int64_t content_length = -1;  // -1: none given
  bool chunked = false;         // Transfer-Encoding: chunked
  bool close = false;           // the server closes after this answer (or HTTP/1.0)
};

// `head`: the response head without its final "\r\n\r\n". kDataLoss naming
// the problem for anything that is not an HTTP/1.x status line with sane
// framing headers (a bad or repeated Content-Length, a Transfer-Encoding
// other than chunked).
absl::StatusOr<HttpResponseHead> ParseResponseHead(absl::string_view head);

// True when a response to `method` with `status` has no body whatever its
// headers say (HEAD, 1xx, 204, 304).
bool ResponseHasNoBody(absl::string_view method, int status);

// Decodes a chunked body incrementally: any split of the input gives the
// same output. Chunk extensions and trailers are skipped; a chunk-size line
// or a trailer line over 4 KiB, a size that is not hex or over 2^62, or a
// chunk not followed by CRLF is kDataLoss (the decoder then stays failed).
class ChunkedDecoder {
 public:
  // Appends the data of `in` to `out`; returns the bytes of `in` used (all of
  // them unless done() became true partway: the rest follows the body).
  absl::StatusOr<size_t> Feed(absl::string_view in, std::string* out);
  // The last chunk and the trailers have been read.
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone, kFailed };
  State state_ = State::kSize;
  std::string line_;
  uint64_t left_ = 0;  // bytes of the current chunk still to come
};

// `s` with every byte but RFC 3986's unreserved ones as %XX: a query value.
std::string PercentEncode(absl::string_view s);

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_RESPONSE_H_
