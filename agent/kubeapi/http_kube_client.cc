#include "agent/kubeapi/http_kube_client.h"

#include "absl/strings/str_cat.h"
#include "agent/base/json_text.h"
#include "agent/base/utf8.h"
#include "agent/http/response.h"
#include "agent/kubeapi/api_status.h"
#include "agent/kubeapi/watch_stream.h"

namespace fabric::kubeapi {
namespace {

// An error answer to a watch is a Status; more than this is not one.
constexpr size_t kMaxWatchErrorBodyBytes = 1 << 20;
// A watch may stay silent between bookmarks; past its timeoutSeconds plus
// this slack the server should have ended it, so the client does.
constexpr absl::Duration kWatchDeadlineSlack = absl::Seconds(30);

bool Is2xx(int code) { return code >= 200 && code <= 299; }

// The one mapping of transport failures (before any HTTP answer): the
// client's message names the server and the CA file; `what` says which call.
absl::Status TransportError(const absl::Status& s, const std::string& what) {
  switch (s.code()) {
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kFailedPrecondition:  // the certificate or the CA file
    case absl::StatusCode::kResourceExhausted:
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    case absl::StatusCode::kDeadlineExceeded:
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": the API server timed out: ", s.message()));
    default:  // cannot connect, the connection broke, not an HTTP answer: try again later
      return absl::UnavailableError(
          absl::StrCat(what, ": cannot reach the API server: ", s.message()));
  }
}

}  // namespace

struct HttpKubeClient::Call {
  std::string what;  // "update resourceslices node-a-0": every message starts with it
  const char* method = "GET";
  std::string url_path;  // path + query
  const std::string* body = nullptr;
  const char* content_type = nullptr;
  Canceller* cancel = nullptr;
  absl::Duration timeout;
  // Watches: lines of a 200 answer go to on_line through the splitter.
  const WatchLineHandler* on_line = nullptr;
  std::optional<WatchLineSplitter> splitter;
  absl::Status stream_status;  // why the splitter ended the stream
};

HttpKubeClient::HttpKubeClient(KubeConfig config, std::unique_ptr<HttpClient> http)
    : config_(std::move(config)), http_(std::move(http)) {
  if (!config_.token_file.empty()) token_.emplace(config_.token_file);
}

HttpKubeClient::~HttpKubeClient() = default;

absl::StatusOr<std::unique_ptr<HttpKubeClient>> HttpKubeClient::Create(KubeConfig config) {
  HttpClientOptions o;
  o.base_url = config.server;
  o.ca_file = config.ca_file;
  o.insecure = config.insecure_skip_tls_verify;
  o.connect_timeout = config.connect_timeout;
  auto http = HttpClient::Create(o);
  if (!http.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("API server URL: ", http.status().message()));
  }
  return std::unique_ptr<HttpKubeClient>(new HttpKubeClient(std::move(config), *std::move(http)));
}

absl::StatusOr<HttpClientResponse> HttpKubeClient::Perform(Call& call) {
  HttpClientRequest req;
  req.method = call.method;
  req.target = call.url_path;
  req.body = call.body;
  req.timeout = call.timeout;
  req.cancel = call.cancel;
  req.max_body_bytes = call.on_line != nullptr ? kMaxWatchErrorBodyBytes : kMaxBodyBytes;
  if (call.on_line != nullptr) {
    req.on_body = [&call](absl::string_view data) {
      absl::Status st = call.splitter->Feed(data, *call.on_line);
      if (!st.ok()) {
        call.stream_status = std::move(st);
        return false;
      }
      return !call.splitter->stopped();
    };
  }
  // A 401 may mean the token rotated between our read and the request:
  // read the file again and retry once.
  for (int attempt = 0;; ++attempt) {
    req.headers = {{"Accept", "application/json"}, {"User-Agent", config_.user_agent}};
    if (call.content_type != nullptr) req.headers.emplace_back("Content-Type", call.content_type);
    if (token_.has_value()) {
      if (attempt > 0) token_->Invalidate();
      auto t = token_->Token();
      if (!t.ok())
        return absl::Status(t.status().code(), absl::StrCat(call.what, ": ", t.status().message()));
      req.headers.emplace_back("Authorization", absl::StrCat("Bearer ", *t));
    }
    auto r = http_->Send(req);
    if (!r.ok()) return TransportError(r.status(), call.what);
    if (r->status != 401 || attempt > 0 || !token_.has_value()) return r;
  }
}

absl::StatusOr<nlohmann::json> HttpKubeClient::JsonCall(absl::string_view verb, const char* method,
                                                        absl::string_view path, std::string query,
                                                        const std::string* body,
                                                        const char* content_type,
                                                        Canceller* cancel) {
  Call call;
  call.what = DescribeRequest(verb, path);
  auto st = CheckResourcePath(path);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(call.what, ": ", st.message()));
  call.method = method;
  call.url_path = absl::StrCat(path, query.empty() ? "" : "?", query);
  call.body = body;
  call.content_type = content_type;
  call.cancel = cancel;
  call.timeout = config_.request_timeout;
  auto r = Perform(call);
  if (!r.ok()) return r.status();
  if (!Is2xx(r->status)) return StatusFromApiResponse(r->status, r->body, call.what);
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::UnknownError(absl::StrCat(call.what, ": API server answered HTTP ", r->status,
                                           " with a body that is not a JSON object: \"",
                                           EscapeBytes(r->body, 80), "\""));
  }
  return j;
}

absl::StatusOr<nlohmann::json> HttpKubeClient::Get(absl::string_view object_path) {
  return JsonCall("get", "GET", object_path, "", nullptr, nullptr);
}

absl::StatusOr<ObjectList> HttpKubeClient::List(absl::string_view collection_path,
                                                const ListOptions& options) {
  std::string query;
  auto add = [&](absl::string_view k, absl::string_view v) {
    absl::StrAppend(&query, query.empty() ? "" : "&", k, "=", PercentEncode(v));
  };
  if (!options.label_selector.empty()) add("labelSelector", options.label_selector);
  if (!options.field_selector.empty()) add("fieldSelector", options.field_selector);
  if (!options.resource_version.empty()) add("resourceVersion", options.resource_version);
  auto j = JsonCall("list", "GET", collection_path, query, nullptr, nullptr, options.cancel);
  if (!j.ok()) return j.status();
  const std::string what = DescribeRequest("list", collection_path);
  ObjectList out;
  auto items = j->find("items");
  if (items != j->end() && !items->is_null()) {
    if (!items->is_array()) {
      return absl::UnknownError(absl::StrCat(what, ": the answer's \"items\" is not an array"));
    }
    out.items.reserve(items->size());
    for (auto& item : *items) out.items.push_back(std::move(item));
  }
  auto md = j->find("metadata");
  if (md != j->end() && md->is_object()) {
    auto rv = md->find("resourceVersion");
    if (rv != md->end() && rv->is_string()) out.resource_version = rv->get<std::string>();
  }
  if (out.resource_version.empty()) {
    return absl::UnknownError(absl::StrCat(what, ": the answer has no metadata.resourceVersion"));
  }
  return out;
}

absl::StatusOr<nlohmann::json> HttpKubeClient::Create(absl::string_view collection_path,
                                                      const nlohmann::json& object) {
  const std::string body = DumpJson(object);
  return JsonCall("create", "POST", collection_path, "", &body, "application/json");
}

absl::StatusOr<nlohmann::json> HttpKubeClient::Update(absl::string_view object_path,
                                                      const nlohmann::json& object) {
  const nlohmann::json* rv = nullptr;
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object() &&
      object["metadata"].contains("resourceVersion")) {
    rv = &object["metadata"]["resourceVersion"];
  }
  if (rv == nullptr || !rv->is_string() || rv->get_ref<const std::string&>().empty()) {
    // Without it the server overwrites whatever is there: a lost update.
    return absl::InvalidArgumentError(absl::StrCat(DescribeRequest("update", object_path),
                                                   ": the object has no metadata.resourceVersion"));
  }
  const std::string body = DumpJson(object);
  return JsonCall("update", "PUT", object_path, "", &body, "application/json");
}

absl::Status HttpKubeClient::Delete(absl::string_view object_path, const DeleteOptions& options) {
  std::string body;
  const std::string* body_ptr = nullptr;
  if (options.uid.has_value() || options.resource_version.has_value()) {
    nlohmann::json pre = nlohmann::json::object();
    if (options.uid.has_value()) pre["uid"] = *options.uid;
    if (options.resource_version.has_value()) pre["resourceVersion"] = *options.resource_version;
    body = DumpJson(
        nlohmann::json{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"preconditions", pre}});
    body_ptr = &body;
  }
  auto j = JsonCall("delete", "DELETE", object_path, "", body_ptr,
                    body_ptr ? "application/json" : nullptr);
  return j.status();
}

absl::StatusOr<nlohmann::json> HttpKubeClient::Apply(absl::string_view object_path,
                                                     const nlohmann::json& object,
                                                     absl::string_view field_manager, bool force) {
  auto st = CheckExternalName("field manager", field_manager, 128);
  if (!st.ok() || field_manager.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeRequest("apply", object_path), ": field manager must be 1-128 printable bytes"));
  }
  // JSON is YAML: the apply patch type takes it as is.
  const std::string body = DumpJson(object);
  std::string query = absl::StrCat("fieldManager=", PercentEncode(field_manager));
  if (force) query += "&force=true";
  return JsonCall("apply", "PATCH", object_path, query, &body, "application/apply-patch+yaml");
}

absl::StatusOr<nlohmann::json> HttpKubeClient::Patch(absl::string_view object_path,
                                                     const nlohmann::json& patch, PatchType type) {
  const std::string body = DumpJson(patch);
  return JsonCall("patch", "PATCH", object_path, "", &body, PatchContentType(type));
}

absl::Status HttpKubeClient::StreamWatch(absl::string_view collection_path,
                                         const WatchRequest& request,
                                         const WatchLineHandler& on_line, Canceller* cancel) {
  Call call;
  call.what = DescribeRequest("watch", collection_path);
  auto st = CheckResourcePath(collection_path);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(call.what, ": ", st.message()));
  const int64_t timeout_s = std::max<int64_t>(1, absl::ToInt64Seconds(request.timeout));
  std::string query = absl::StrCat("watch=1&timeoutSeconds=", timeout_s);
  if (!request.resource_version.empty()) {
    absl::StrAppend(&query, "&resourceVersion=", PercentEncode(request.resource_version));
  }
  if (request.allow_bookmarks) query += "&allowWatchBookmarks=true";
  if (!request.label_selector.empty())
    absl::StrAppend(&query, "&labelSelector=", PercentEncode(request.label_selector));
  if (!request.field_selector.empty())
    absl::StrAppend(&query, "&fieldSelector=", PercentEncode(request.field_selector));
  call.url_path = absl::StrCat(collection_path, "?", query);
  call.cancel = cancel;
  call.timeout = absl::Seconds(timeout_s) + kWatchDeadlineSlack;
  call.on_line = &on_line;
  call.splitter.emplace(request.max_line_bytes);
  auto r = Perform(call);
  if (!r.ok()) return r.status();
  if (!call.stream_status.ok()) {
    return absl::Status(call.stream_status.code(),
                        absl::StrCat(call.what, ": ", call.stream_status.message()));
  }
  if (r->stopped) return absl::OkStatus();  // the handler ended the stream
  if (r->status != 200) return StatusFromApiResponse(r->status, r->body, call.what);
  if (call.splitter->pending_bytes() > 0) {
    return absl::UnavailableError(absl::StrCat(call.what, ": the stream ended inside an event (",
                                               call.splitter->pending_bytes(),
                                               " bytes without a newline)"));
  }
  return absl::OkStatus();
}

}  // namespace fabric::kubeapi
