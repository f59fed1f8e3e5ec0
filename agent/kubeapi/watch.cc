#include "agent/kubeapi/watch.h"

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/kubeapi/api_status.h"

namespace fabric::kubeapi {

void WatchHandler::OnError(const absl::Status& error, absl::Duration retry_in) {
  LogWarn(Component::kAgent, "kubeapi: {} (retry in {})", error.ToString(),
          absl::FormatDuration(retry_in));
}

Watch::Watch(KubeClient* client, WatchOptions options, WatchHandler* handler)
    : client_(client), options_(std::move(options)), handler_(handler) {
  if (!options_.now) options_.now = [] { return MonotonicNow(); };
  if (!options_.random) {
    options_.random = [] {
      thread_local std::mt19937_64 gen{std::random_device{}()};
      return std::uniform_real_distribution<double>(0.0, 1.0)(gen);
    };
  }
}

std::string Watch::resource_version() const {
  std::lock_guard<std::mutex> lock(rv_mu_);
  return rv_;
}

void Watch::Stop() { cancel_.Cancel(); }

absl::Duration Watch::NextBackoff() {
  ++consecutive_failures_;
  absl::Duration base = options_.initial_backoff;
  for (int i = 1; i < consecutive_failures_ && base < options_.max_backoff; ++i) base *= 2;
  base = std::min(base, options_.max_backoff);
  // "Equal jitter": somewhere in [base/2, base], so many agents restarted
  // together do not hit the API server in step, and the cap holds.
  const double r = std::clamp(options_.random(), 0.0, 1.0);
  return base / 2 + (base / 2) * r;
}

namespace {

bool VersionUnavailable(const absl::Status& list_error) {
  // 410 Expired/Gone, and the watch cache's "Too large resource version"
  // (HTTP 504, cause ResourceVersionTooLarge), which client-go also matches by
  // its message (isTooLargeResourceVersionError).
  return absl::IsOutOfRange(list_error) ||
         absl::StrContains(list_error.message(), "Too large resource version");
}

}  // namespace

bool Watch::Backoff(const absl::Status& error) {
  ++failures_;
  const absl::Duration d = NextBackoff();
  handler_->OnError(error, d);
  if (cancel_.cancelled()) return false;
  if (options_.sleep) return options_.sleep(d) && !cancel_.cancelled();
  return cancel_.SleepFor(d);
}

absl::StatusOr<ObjectList> Watch::ListAt(const std::string& resource_version) {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  lo.resource_version = resource_version;
  lo.cancel = &cancel_;
  return client_->List(options_.collection_path, lo);
}

bool Watch::ListOnce() {
  const std::string seen = resource_version();
  const std::string asked = seen.empty() ? "0" : seen;
  auto list = ListAt(asked);
  if (!list.ok() && !cancel_.cancelled() && VersionUnavailable(list.status())) {
    // The server cannot serve that version (compacted, or its cache is behind
    // it after an etcd restore): only a quorum read makes progress.
    LogInfo(Component::kAgent, "kubeapi: {}; listing again from etcd (resourceVersion \"\")",
            list.status().message());
    list = ListAt("");
  }
  if (!list.ok()) {
    if (!cancel_.cancelled()) Backoff(list.status());
    return false;
  }
  ++lists_;
  {
    std::lock_guard<std::mutex> lock(rv_mu_);
    rv_ = list->resource_version;
  }
  handler_->OnList(*list);
  return true;
}

Watch::StreamEnd Watch::StreamOnce() {
  WatchRequest req;
  req.label_selector = options_.label_selector;
  req.field_selector = options_.field_selector;
  req.resource_version = resource_version();
  // Somewhere in [timeout, 2 x timeout], as client-go does, so the watches
  // of many agents started together do not all end and reconnect together.
  req.timeout = options_.stream_timeout * (1.0 + std::clamp(options_.random(), 0.0, 1.0));
  req.max_line_bytes = options_.max_line_bytes;
  const std::string what = DescribeRequest("watch", options_.collection_path);

  absl::Status event_error;  // a bad line or an ERROR event ends the stream
  uint64_t events = 0;
  auto on_line = [&](absl::string_view line) {
    auto ev = ParseWatchEvent(line);
    if (!ev.ok()) {
      event_error =
          absl::Status(ev.status().code(), absl::StrCat(what, ": ", ev.status().message()));
      return false;
    }
    if (ev->type == WatchEvent::Type::kError) {
      event_error = StatusFromApiStatusObject(ev->object, what);
      return false;
    }
    ++events;
    consecutive_failures_ = 0;  // the server is answering with events again
    {
      std::lock_guard<std::mutex> lock(rv_mu_);
      rv_ = ev->resource_version;
    }
    if (ev->type != WatchEvent::Type::kBookmark) handler_->OnEvent(*ev);
    return !cancel_.cancelled();
  };

  ++streams_;
  const absl::Time started = options_.now();
  absl::Status st = client_->StreamWatch(options_.collection_path, req, on_line, &cancel_);
  if (cancel_.cancelled()) return StreamEnd::kStopped;
  if (st.ok() && !event_error.ok()) st = event_error;
  if (st.code() == absl::StatusCode::kOutOfRange) {
    // Our resourceVersion left the server's window: only a new list can
    // tell what changed meanwhile. Back off only if it keeps happening.
    if (consecutive_failures_ > 0 && !Backoff(st)) return StreamEnd::kStopped;
    if (consecutive_failures_ == 0) ++consecutive_failures_;
    LogInfo(Component::kAgent, "kubeapi: {}; re-listing", st.message());
    return StreamEnd::kRelist;
  }
  if (!st.ok()) {
    const bool transport = st.code() == absl::StatusCode::kUnavailable ||
                           st.code() == absl::StatusCode::kDeadlineExceeded;
    if (!Backoff(st)) return StreamEnd::kStopped;
    // Nothing was lost on a broken connection (an event is applied only
    // once whole): resume. Anything else (a bad event, 403) re-lists.
    return transport ? StreamEnd::kResume : StreamEnd::kRelist;
  }
  if (events == 0 && options_.now() - started < options_.min_healthy_stream) {
    if (!Backoff(absl::UnavailableError(
            absl::StrCat(what, ": the stream ended at once without events"))))
      return StreamEnd::kStopped;
  }
  return StreamEnd::kResume;
}

absl::Status Watch::Run() {
  bool need_list = true;
  while (!cancel_.cancelled()) {
    if (need_list) {
      if (!ListOnce()) continue;
      need_list = false;
    }
    switch (StreamOnce()) {
      case StreamEnd::kResume:
        break;
      case StreamEnd::kRelist:
        need_list = true;
        break;
      case StreamEnd::kStopped:
        return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace fabric::kubeapi
