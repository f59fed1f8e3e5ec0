#include "agent/kubeapi/http_kube_client.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "agent/base/json_text.h"
#include "agent/base/utf8.h"
#include "agent/kubeapi/api_status.h"
#include "agent/kubeapi/curl_library.h"
#include "agent/kubeapi/watch_stream.h"

namespace fabric::kubeapi {
namespace {

// An error answer to a watch is a Status; more than this is not one.
constexpr size_t kMaxWatchErrorBodyBytes = 1 << 20;
// A watch may stay silent between bookmarks; past its timeoutSeconds plus
// this slack the server should have ended it, so the client does.
constexpr absl::Duration kWatchDeadlineSlack = absl::Seconds(30);

bool Is2xx(long code) { return code >= 200 && code <= 299; }

}  // namespace

struct HttpKubeClient::Handle {
  const CurlApi* curl = nullptr;
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
  ~Handle() {
    if (multi != nullptr) curl->multi_cleanup(multi);
    if (easy != nullptr) curl->easy_cleanup(easy);
  }
};

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
  absl::Status stream_status;
  bool stopped_by_handler = false;
  // Per attempt.
  const CurlApi* curl = nullptr;
  CURL* easy = nullptr;
  std::string buffer;
  size_t max_body = kMaxBodyBytes;
  bool too_big = false;
};

namespace {

size_t OnData(char* data, size_t size, size_t n, void* user) {
  auto* call = static_cast<HttpKubeClient::Call*>(user);
  const size_t len = size * n;
  if (call->on_line != nullptr) {
    long code = 0;
    call->curl->easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code == 200) {
      absl::Status st = call->splitter->Feed(absl::string_view(data, len), *call->on_line);
      if (!st.ok()) {
        call->stream_status = std::move(st);
        return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
      }
      if (call->splitter->stopped()) {
        call->stopped_by_handler = true;
        return 0;
      }
      return len;
    }
  }
  if (call->buffer.size() + len > call->max_body) {
    call->too_big = true;
    return 0;
  }
  call->buffer.append(data, len);
  return len;
}

}  // namespace

HttpKubeClient::HttpKubeClient(KubeConfig config, const CurlApi* curl)
    : config_(std::move(config)), curl_(curl) {
  if (!config_.token_file.empty()) token_.emplace(config_.token_file);
}

HttpKubeClient::~HttpKubeClient() = default;

absl::StatusOr<std::unique_ptr<HttpKubeClient>> HttpKubeClient::Create(KubeConfig config) {
  auto curl = LoadCurl();
  if (!curl.ok()) return curl.status();
  return std::unique_ptr<HttpKubeClient>(new HttpKubeClient(std::move(config), *curl));
}

std::unique_ptr<HttpKubeClient::Handle> HttpKubeClient::TakeHandle() {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!pool_.empty()) {
      auto h = std::move(pool_.back());
      pool_.pop_back();
      return h;
    }
  }
  auto h = std::make_unique<Handle>();
  h->curl = curl_;
  h->easy = curl_->easy_init();
  h->multi = curl_->multi_init();
  if (h->easy == nullptr || h->multi == nullptr) return nullptr;
  return h;
}

void HttpKubeClient::ReturnHandle(std::unique_ptr<Handle> h) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  // A handful of idle connections is plenty for one agent.
  if (pool_.size() < 4) pool_.push_back(std::move(h));
}

std::string HttpKubeClient::Escape(absl::string_view s) {
  char* e = curl_->easy_escape(nullptr, s.data(), static_cast<int>(s.size()));
  std::string out = e != nullptr ? e : "";
  curl_->free(e);
  return out;
}

// The one mapping of transport failures (before any HTTP answer).
static absl::Status StatusFromCurl(const CurlApi& curl, CURLcode rc, const char* errbuf,
                                   const std::string& what, const KubeConfig& config) {
  const std::string detail =
      SanitizeServerText(errbuf[0] != '\0' ? errbuf : curl.easy_strerror(rc), 300);
  const std::string ca =
      config.ca_file.empty() ? "the system's CAs" : absl::StrCat("CA file ", config.ca_file);
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": TLS: the API server ", config.server,
                       " presented a certificate that ", ca, " does not verify: ", detail));
    case CURLE_SSL_CACERT_BADFILE:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": TLS: cannot load ", ca, ": ", detail));
    case CURLE_SSL_CONNECT_ERROR:
      return absl::UnavailableError(
          absl::StrCat(what, ": TLS handshake with ", config.server, " failed: ", detail));
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": API server ", config.server, " timed out: ", detail));
    default:
      return absl::UnavailableError(
          absl::StrCat(what, ": cannot reach the API server ", config.server, ": ", detail));
  }
}

absl::StatusOr<HttpKubeClient::Response> HttpKubeClient::PerformOnce(Call& call,
                                                                     const std::string& token) {
  std::unique_ptr<Handle> h = TakeHandle();
  if (h == nullptr)
    return absl::InternalError(absl::StrCat(call.what, ": curl handle allocation failed"));
  CURL* e = h->easy;
  curl_->easy_reset(e);
  call.curl = curl_;
  call.easy = e;
  call.buffer.clear();
  call.too_big = false;
  if (call.on_line != nullptr) call.max_body = kMaxWatchErrorBodyBytes;

  char errbuf[CURL_ERROR_SIZE] = {0};
  const std::string url = config_.server + call.url_path;
  curl_->easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_->easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
  curl_->easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_->easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_->easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_->easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_->easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(config_.connect_timeout)));
  curl_->easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(call.timeout)));
  curl_->easy_setopt(e, CURLOPT_USERAGENT, config_.user_agent.c_str());
  curl_->easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnData);
  curl_->easy_setopt(e, CURLOPT_WRITEDATA, &call);
  if (config_.insecure_skip_tls_verify) {
    curl_->easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_->easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    curl_->easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_->easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!config_.ca_file.empty()) curl_->easy_setopt(e, CURLOPT_CAINFO, config_.ca_file.c_str());
  }
  if (absl::string_view(call.method) != "GET")
    curl_->easy_setopt(e, CURLOPT_CUSTOMREQUEST, call.method);
  if (call.body != nullptr) {
    curl_->easy_setopt(e, CURLOPT_POSTFIELDS, call.body->data());
    curl_->easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body->size()));
  }
  struct curl_slist* headers = nullptr;
  headers = curl_->slist_append(headers, "Accept: application/json");
  headers = curl_->slist_append(headers, "Expect:");  // no 100-continue round trip
  if (call.content_type != nullptr) {
    headers =
        curl_->slist_append(headers, absl::StrCat("Content-Type: ", call.content_type).c_str());
  }
  if (!token.empty()) {
    headers = curl_->slist_append(headers, absl::StrCat("Authorization: Bearer ", token).c_str());
  }
  curl_->easy_setopt(e, CURLOPT_HTTPHEADER, headers);

  bool cancelled = false;
  CURLcode rc = CURLE_OK;
  curl_->multi_add_handle(h->multi, e);
  {
    CURLM* multi = h->multi;
    const CurlApi* curl = curl_;
    Canceller::WakerGuard guard(call.cancel, [multi, curl] { curl->multi_wakeup(multi); });
    int running = 1;
    while (true) {
      if (curl_->multi_perform(h->multi, &running) != CURLM_OK) {
        rc = CURLE_RECV_ERROR;
        break;
      }
      if (running == 0) break;
      if (call.cancel != nullptr && call.cancel->cancelled()) {
        cancelled = true;
        break;
      }
      curl_->multi_poll(h->multi, nullptr, 0, 1000, nullptr);
    }
    int queued = 0;
    while (CURLMsg* msg = curl_->multi_info_read(h->multi, &queued)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) rc = msg->data.result;
    }
  }
  long code = 0;
  curl_->easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_->multi_remove_handle(h->multi, e);
  curl_->easy_setopt(e, CURLOPT_HTTPHEADER, nullptr);
  curl_->slist_free_all(headers);
  ReturnHandle(std::move(h));

  if (cancelled) return absl::CancelledError(absl::StrCat(call.what, ": cancelled"));
  if (rc == CURLE_WRITE_ERROR && call.stopped_by_handler) return Response{200, ""};
  if (rc == CURLE_WRITE_ERROR && !call.stream_status.ok()) {
    return absl::Status(call.stream_status.code(),
                        absl::StrCat(call.what, ": ", call.stream_status.message()));
  }
  if (rc == CURLE_WRITE_ERROR && call.too_big) {
    return absl::ResourceExhaustedError(absl::StrCat(
        call.what, ": the API server's answer is larger than ", call.max_body, " bytes"));
  }
  if (rc != CURLE_OK) return StatusFromCurl(*curl_, rc, errbuf, call.what, config_);
  return Response{code, std::move(call.buffer)};
}

absl::StatusOr<HttpKubeClient::Response> HttpKubeClient::Perform(Call& call) {
  // A 401 may mean the token rotated between our read and the request:
  // read the file again and retry once.
  for (int attempt = 0;; ++attempt) {
    std::string token;
    if (token_.has_value()) {
      if (attempt > 0) token_->Invalidate();
      auto t = token_->Token();
      if (!t.ok())
        return absl::Status(t.status().code(), absl::StrCat(call.what, ": ", t.status().message()));
      token = *std::move(t);
    }
    auto r = PerformOnce(call, token);
    if (!r.ok() || r->code != 401 || attempt > 0 || !token_.has_value()) return r;
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
  if (!Is2xx(r->code)) return StatusFromApiResponse(r->code, r->body, call.what);
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::UnknownError(absl::StrCat(call.what, ": API server answered HTTP ", r->code,
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
    absl::StrAppend(&query, query.empty() ? "" : "&", k, "=", Escape(v));
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
  std::string query = absl::StrCat("fieldManager=", Escape(field_manager));
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
    absl::StrAppend(&query, "&resourceVersion=", Escape(request.resource_version));
  }
  if (request.allow_bookmarks) query += "&allowWatchBookmarks=true";
  if (!request.label_selector.empty())
    absl::StrAppend(&query, "&labelSelector=", Escape(request.label_selector));
  if (!request.field_selector.empty())
    absl::StrAppend(&query, "&fieldSelector=", Escape(request.field_selector));
  call.url_path = absl::StrCat(collection_path, "?", query);
  call.cancel = cancel;
  call.timeout = absl::Seconds(timeout_s) + kWatchDeadlineSlack;
  call.on_line = &on_line;
  call.splitter.emplace(request.max_line_bytes);
  auto r = Perform(call);
  if (!r.ok()) return r.status();
  if (call.stopped_by_handler) return absl::OkStatus();
  if (r->code != 200) return StatusFromApiResponse(r->code, r->body, call.what);
  if (call.splitter->pending_bytes() > 0) {
    return absl::UnavailableError(absl::StrCat(call.what, ": the stream ended inside an event (",
                                               call.splitter->pending_bytes(),
                                               " bytes without a newline)"));
  }
  return absl::OkStatus();
}

}  // namespace fabric::kubeapi
