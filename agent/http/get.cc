#include "agent/http/get.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/http/client.h"

namespace fabric {
namespace {

absl::StatusOr<HttpResponse> Get(const std::string& base, HttpClientOptions options,
                                 const std::string& path, HttpHeaders headers,
                                 absl::Duration timeout) {
  options.connect_timeout = timeout;
  options.max_idle_connections = 0;
  auto client = HttpClient::Create(std::move(options));
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("agent address '", base, "': ", client.status().message()));
  }
  HttpClientRequest req;
  req.target = path;
  req.headers = std::move(headers);
  req.headers.emplace_back("User-Agent", "fabricctl");
  req.timeout = timeout;
  auto r = (*client)->Send(req);
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kFailedPrecondition ||
        r.status().code() == absl::StatusCode::kResourceExhausted) {
      return r.status();
    }
    if (r.status().code() == absl::StatusCode::kDataLoss) {
      return absl::DataLossError(absl::StrCat("agent at ", base, ": not an HTTP response"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot reach the agent at ", base, ": ", r.status().message()));
  }
  return HttpResponse{r->status, std::move(r->body)};
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& base, const std::string& path,
                                     absl::Duration timeout) {
  absl::string_view hp = base;
  absl::ConsumePrefix(&hp, "http://");
  absl::ConsumeSuffix(&hp, "/");
  const size_t colon = hp.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == hp.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent address '", base, "': expected host:port or http://host:port"));
  }
  HttpClientOptions o;
  o.base_url = absl::StrCat("http://", colon == 0 ? "127.0.0.1" : "", hp);
  return Get(base, std::move(o), path, {}, timeout);
}

absl::StatusOr<HttpResponse> HttpsGet(const std::string& base, const std::string& path,
                                      const HttpsOptions& h) {
  if (!absl::StartsWith(base, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", base, "' is not https://host:port"));
  }
  HttpClientOptions o;
  o.base_url = base;
  o.ca_file = h.ca_file;
  o.insecure = h.insecure;
  o.server_name = h.server_name;
  HttpHeaders headers;
  if (!h.bearer_token.empty()) headers.emplace_back("Authorization", "Bearer " + h.bearer_token);
  return Get(base, std::move(o), path, std::move(headers), h.timeout);
}

}  // namespace fabric
