#include "agent/http/response.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/utf8.h"

namespace fabric {
namespace {

constexpr size_t kMaxChunkLine = 4096;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("not an HTTP/1.1 answer: ", what));
}

}  // namespace

const char* HttpStatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

std::string WriteResponseHead(int status, absl::string_view content_type, size_t content_length) {
  return absl::StrCat("HTTP/1.1 ", status, " ", HttpStatusText(status),
                      "\r\nContent-Type: ", content_type, "\r\nContent-Length: ", content_length,
                      status == 401 ? "\r\nWWW-Authenticate: Bearer" : "",
                      status == 405 ? "\r\nAllow: GET, HEAD" : "", "\r\nConnection: close\r\n\r\n");
}

std::string WriteRequestHead(absl::string_view method, absl::string_view target,
                             absl::string_view host, const HttpHeaders& headers,
                             int64_t body_length) {
  std::string out = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n");
  if (body_length >= 0) absl::StrAppend(&out, "Content-Length: ", body_length, "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  out += "\r\n";
  return out;
}

absl::StatusOr<HttpResponseHead> ParseResponseHead(absl::string_view head) {
  HttpResponseHead out;
  const size_t eol = head.find("\r\n");
  const absl::string_view line = head.substr(0, eol);
  // "HTTP/1.1 200 OK": the reason may be empty or hold spaces.
  if (line.size() < 12 || !absl::StartsWith(line, "HTTP/1.") || line[8] != ' ' ||
      (line.size() > 12 && line[12] != ' ') || !absl::SimpleAtoi(line.substr(9, 3), &out.status) ||
      out.status < 100 || !absl::ascii_isdigit(static_cast<unsigned char>(line[9]))) {
    return Malformed(absl::StrCat("status line \"", EscapeBytes(line, 80), "\""));
  }
  out.close = line[7] == '0';
  if (eol == absl::string_view::npos) return out;
  bool has_length = false;
  for (absl::string_view h : absl::StrSplit(head.substr(eol + 2), "\r\n")) {
    const size_t colon = h.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(h.substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(h.substr(colon + 1));
    if (absl::EqualsIgnoreCase(name, "content-length")) {
      int64_t n = -1;
      if (has_length || !absl::SimpleAtoi(value, &n) || n < 0 ||
          !absl::ascii_isdigit(static_cast<unsigned char>(value.empty() ? 'x' : value[0]))) {
        return Malformed(absl::StrCat("Content-Length \"", EscapeBytes(value, 40), "\""));
      }
      has_length = true;
      out.content_length = n;
    } else if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      if (!absl::EqualsIgnoreCase(value, "chunked")) {
        return Malformed(absl::StrCat("Transfer-Encoding \"", EscapeBytes(value, 40), "\""));
      }
      out.chunked = true;
    } else if (absl::EqualsIgnoreCase(name, "connection")) {
      for (absl::string_view token : absl::StrSplit(value, ',')) {
        if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(token), "close")) out.close = true;
      }
    }
  }
  // RFC 9112 6.3: chunked wins over a length (and such an answer is suspect).
  if (out.chunked) {
    out.content_length = -1;
    if (has_length) out.close = true;
  }
  return out;
}

bool ResponseHasNoBody(absl::string_view method, int status) {
  return method == "HEAD" || status < 200 || status == 204 || status == 304;
}

absl::StatusOr<size_t> ChunkedDecoder::Feed(absl::string_view in, std::string* out) {
  size_t i = 0;
  auto fail = [this](absl::string_view what) {
    state_ = State::kFailed;
    return absl::DataLossError(absl::StrCat("chunked body: ", what));
  };
  // Collects a line into line_; true once it is complete (CRLF dropped).
  auto take_line = [&](bool* complete) -> absl::Status {
    const size_t nl = in.find('\n', i);
    const size_t end = nl == absl::string_view::npos ? in.size() : nl;
    if (line_.size() + (end - i) > kMaxChunkLine) return fail("a line over 4 KiB");
    line_.append(in.data() + i, end - i);
    i = nl == absl::string_view::npos ? in.size() : nl + 1;
    *complete = nl != absl::string_view::npos;
    if (*complete && !line_.empty() && line_.back() == '\r') line_.pop_back();
    return absl::OkStatus();
  };
  while (i < in.size() && state_ != State::kDone) {
    switch (state_) {
      case State::kSize: {
        bool complete = false;
        if (absl::Status s = take_line(&complete); !s.ok()) return s;
        if (!complete) break;
        absl::string_view hex = line_;
        hex = absl::StripAsciiWhitespace(hex.substr(0, hex.find(';')));
        uint64_t size = 0;
        if (hex.empty() || hex.size() > 16) return fail("a chunk size that is not hex");
        for (char c : hex) {
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
            return fail("a chunk size that is not hex");
          }
          size = size * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(c))
                                  ? c - '0'
                                  : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10);
        }
        if (size > (uint64_t{1} << 62)) return fail("a chunk size over 2^62");
        line_.clear();
        left_ = size;
        state_ = size == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, in.size() - i));
        out->append(in.data() + i, n);
        i += n;
        left_ -= n;
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        bool complete = false;
        if (absl::Status s = take_line(&complete); !s.ok()) return s;
        if (!complete) break;
        if (!line_.empty()) return fail("a chunk longer than its size");
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        bool complete = false;
        if (absl::Status s = take_line(&complete); !s.ok()) return s;
        if (!complete) break;
        if (line_.empty()) state_ = State::kDone;  // the blank line after the trailers
        line_.clear();
        break;
      }
      case State::kDone:
        break;
      case State::kFailed:
        return fail("failed before");
    }
  }
  if (state_ == State::kFailed) return fail("failed before");
  return i;
}

std::string PercentEncode(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace fabric
