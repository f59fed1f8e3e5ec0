// The agent's HTTP request head (agent/http/request.h): bytes from
// any client that can reach --metrics-address.
// Input: the bytes a client sent; as the server does, the head is what comes
// before the first "\r\n\r\n" (the whole input when there is none).
// Invariant: ParseRequestHead never crashes and answers 0 (route), 400 or
// 405; a routed request is a GET or HEAD whose path is its target up to '?'
// (no '?', no space, no "\r\n": nothing that could split a response or a log
// line); 405 is never head_only; and the request rebuilt from what was parsed
// ("<GET|HEAD> <path>?q HTTP/1.1") parses again to the same result.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/http/request.h"
#include "test/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const absl::string_view head = absl::string_view(in).substr(0, in.find("\r\n\r\n"));
  const fabric::HttpRequestHead r = fabric::ParseRequestHead(head);
  FUZZ_CHECK(r.status == 0 || r.status == 400 || r.status == 405);
  if (r.status != 0) {
    FUZZ_CHECK(r.path.empty());
    FUZZ_CHECK(r.status != 405 || !r.head_only);
    return 0;
  }
  const absl::string_view line = head.substr(0, head.find("\r\n"));
  // Spaces around the three parts are tolerated (the parse splits on runs of
  // spaces), so the method is the line's first word, not its first bytes.
  FUZZ_CHECK(
      absl::StartsWith(line.substr(line.find_first_not_of(' ')), r.head_only ? "HEAD " : "GET "));
  FUZZ_CHECK(r.path.find('?') == std::string::npos);
  FUZZ_CHECK(r.path.find(' ') == std::string::npos);
  FUZZ_CHECK(r.path.find("\r\n") == std::string::npos);
  FUZZ_CHECK(absl::StrContains(line, r.path));
  // The bearer token (TLS /v1/pods): one header line's bytes, trimmed, never
  // a line break (it goes into a TokenReview's JSON, not into a header).
  FUZZ_CHECK(r.bearer_token.find('\n') == std::string::npos);
  FUZZ_CHECK(r.bearer_token.find('\r') == std::string::npos);
  FUZZ_CHECK(r.bearer_token.empty() ||
             (r.bearer_token.front() != ' ' && r.bearer_token.back() != ' '));
  FUZZ_CHECK(absl::StrContains(head, r.bearer_token));
  const std::string again =
      absl::StrCat(r.head_only ? "HEAD " : "GET ", r.path, "?q HTTP/1.1\r\nHost: x");
  const fabric::HttpRequestHead r2 = fabric::ParseRequestHead(again);
  FUZZ_CHECK(r2.status == 0 && r2.head_only == r.head_only && r2.path == r.path);
  return 0;
}
