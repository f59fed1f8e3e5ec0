// The request line of an HTTP/1.x request head, as the agent's HTTP server
// (http_server.h) reads it: a pure function of the bytes a client sent, so it
// is fuzzed on its own (test/fuzz/http_request_fuzzer.cc).
#ifndef FABRIC_AGENT_HTTP_REQUEST_H_
#define FABRIC_AGENT_HTTP_REQUEST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace fabric {

struct HttpRequestHead {
  // 0: a GET or HEAD to route by `path`; otherwise the status to answer:
  // 400 (not "<method> <target> HTTP/1.x") or 405 (another method).
  int status = 400;
  bool head_only = false;  // HEAD: answer without the body
  std::string path;        // the request target up to '?' (status 0 only)
  std::string query;       // after the first '?', "" without one (status 0 only)
  // The token of an "Authorization: Bearer <token>" header (the last one
  // wins), "" without one; the only header read (the TLS /v1/pods).
  std::string bearer_token;
};

// `head`: the request head without its final "\r\n\r\n". Of the header
// lines only Authorization is read.
HttpRequestHead ParseRequestHead(absl::string_view head);

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_REQUEST_H_
