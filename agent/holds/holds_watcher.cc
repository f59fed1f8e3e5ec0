#include "agent/holds/holds_watcher.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::holds {
namespace {

using podresources::PodDevices;

std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

}  // namespace

HoldsWatcher::HoldsWatcher(HoldsWatcherOptions options, podresources::PodResourcesSource* source,
                           Sink sink, std::function<void()> no_source,
                           std::function<void()> after_round)
    : options_(std::move(options)),
      source_(source),
      sink_(std::move(sink)),
      no_source_(std::move(no_source)),
      after_round_(std::move(after_round)),
      checkpoint_(options_.checkpoint_path) {}

HoldsWatcher::~HoldsWatcher() { Stop(); }

void HoldsWatcher::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void HoldsWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HoldsWatcher::RequestRefresh() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    refresh_requested_ = true;
  }
  cv_.notify_all();
}

void HoldsWatcher::Loop() {
  while (true) {
    bool requested = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.interval),
                   [this] { return stop_ || refresh_requested_; });
      if (stop_) return;
      requested = refresh_requested_;
      refresh_requested_ = false;
    }
    if (requested) absl::SleepFor(options_.after_grant_delay);
    RunRound();
  }
}

HoldsStatus HoldsWatcher::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

std::vector<PodDevices> HoldsWatcher::BoundUnlisted(std::vector<PodDevices> joined, absl::Time now,
                                                    bool list_settled) {
  std::map<std::tuple<std::string, std::string, std::string>, absl::Time> still;
  std::set<std::string> present;
  for (const PodDevices& e : joined) {
    if (e.pod_uid.empty()) continue;
    present.insert(e.pod_uid);
    if (!e.pod.empty()) listed_uids_.insert(e.pod_uid);
  }
  std::vector<PodDevices> out;
  for (PodDevices& e : joined) {
    if (!e.pod.empty() || e.pod_uid.empty()) {
      out.push_back(std::move(e));
      continue;
    }
    if (list_settled && listed_uids_.count(e.pod_uid) > 0) {
      if (left_uids_.insert(e.pod_uid).second)
        LogInfo(Component::kPodResources,
                "Pod {} left the PodResources List: its {} allocation in the kubelet checkpoint is "
                "no longer a hold (the kubelet drops it at its next allocation)",
                e.pod_uid, e.resource);
      continue;
    }
    const auto key = std::make_tuple(e.pod_uid, e.container, e.resource);
    auto prior = unlisted_since_.find(key);
    const absl::Time since = prior == unlisted_since_.end() ? now : prior->second;
    still[key] = since;
    if (now - since >= options_.unlisted_hold_max) {
      if (now - since - options_.interval < options_.unlisted_hold_max) {
        LogInfo(Component::kPodResources,
                "checkpoint allocation of Pod {} container {} ({}) is no longer a hold: the "
                "PodResources List has not shown its Pod for {}",
                e.pod_uid, e.container, e.resource, Seconds(options_.unlisted_hold_max));
      }
      continue;
    }
    out.push_back(std::move(e));
  }
  unlisted_since_ = std::move(still);
  // A UID stays known as listed while the checkpoint has it, so a Pod that
  // left stays dropped.
  std::erase_if(listed_uids_, [&](const std::string& uid) { return !present.count(uid); });
  std::erase_if(left_uids_, [&](const std::string& uid) { return !present.count(uid); });
  return out;
}

void HoldsWatcher::RunRound() {
  std::lock_guard<std::mutex> round(round_mu_);
  const absl::Time now = options_.clock();
  KubeletView view;
  view.observed_at = now;

  // The kubelet replaces its PodResources socket when it restarts; a new
  // file has a new (inode, ctime) even where the inode number is reused.
  struct stat st;
  const bool socket_exists = stat(options_.podresources_socket.c_str(), &st) == 0;
  bool socket_replaced = false;
  if (socket_exists) {
    const uint64_t id = static_cast<uint64_t>(st.st_ino) * 1000003u ^
                        static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000u ^
                        static_cast<uint64_t>(st.st_ctim.tv_nsec);
    socket_replaced = socket_ino_ != 0 && id != socket_ino_;
    if (socket_replaced) {
      std::lock_guard<std::mutex> lock(status_mu_);
      status_.kubelet_restarts++;
    }
    // Seen in a round whose List failed (the new kubelet not serving yet),
    // it still names the settle that starts when List answers.
    replaced_unsettled_ = replaced_unsettled_ || socket_replaced;
    socket_ino_ = id;
  }

  absl::StatusOr<std::vector<PodDevices>> list = absl::UnavailableError(
      absl::StrCat("no PodResources socket at ", options_.podresources_socket));
  if (socket_exists) list = source_->ListPodDevices();
  auto checkpoint = checkpoint_.Read();

  HoldsStatus st_now;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    st_now = status_;
  }
  st_now.rounds++;
  st_now.podresources_seen = st_now.podresources_seen || socket_exists;
  if (checkpoint.ok() != st_now.checkpoint_ok ||
      (!checkpoint.ok() && st_now.checkpoint_error != checkpoint.status().message())) {
    if (checkpoint.ok()) {
      LogInfo(Component::kPodResources,
              "kubelet checkpoint {} read: init containers and Pods "
              "the List does not show yet are held too",
              options_.checkpoint_path);
    } else {
      // Absent is normal until the kubelet first has a device plugin;
      // anything else (unreadable, not the kubelet's shape) is a warning.
      const bool absent = absl::IsNotFound(checkpoint.status());
      LogMessage(Component::kPodResources, absent ? LogLevel::kInfo : LogLevel::kWarn,
                 absl::StrCat("kubelet checkpoint not used (", checkpoint.status().message(),
                              "): holds come from the PodResources List alone, which misses "
                              "init containers and is empty right after a kubelet restart"));
    }
  }
  st_now.checkpoint_ok = checkpoint.ok();
  st_now.checkpoint_error = checkpoint.ok() ? "" : std::string(checkpoint.status().message());
  static const std::vector<PodDevices> kNone;
  const std::vector<PodDevices>& checkpointed = checkpoint.ok() ? *checkpoint : kNone;
  st_now.not_ready_reason.clear();

  bool have_view = true;
  if (list.ok()) {
    // After failures the kubelet may have restarted unseen: settle as well.
    const bool recovered = failing_since_ != absl::InfiniteFuture();
    failing_since_ = absl::InfiniteFuture();
    if (replaced_unsettled_ || recovered) {
      // Pods arrive in the new List one by one: none has "left" yet.
      listed_uids_.clear();
      left_uids_.clear();
      settle_from_ = now;
      settle_why_ = replaced_unsettled_
                        ? "the kubelet restarted (its PodResources socket was replaced)"
                        : "PodResources List answers again after failing";
      LogInfo(Component::kPodResources, "{}: every hold is kept for {} while its view settles",
              settle_why_, Seconds(options_.restart_settle));
      replaced_unsettled_ = false;
    }
    st_now.list_failing_for = absl::ZeroDuration();
    const bool settled = now - settle_from_ >= options_.restart_settle;
    view.entries = BoundUnlisted(JoinListAndCheckpoint(*list, checkpointed), now, settled);
    if (!settled) {
      view.complete = false;
      view.incomplete_reason = absl::StrCat(settle_why_, " ", Seconds(now - settle_from_),
                                            " ago; holds are kept until it has settled");
    }
  } else if (st_now.podresources_seen) {
    if (failing_since_ == absl::InfiniteFuture()) failing_since_ = now;
    st_now.list_errors++;
    st_now.last_list_error = std::string(list.status().message());
    st_now.list_failing_for = now - failing_since_;
    if (st_now.list_errors % 30 == 1) {
      LogWarn(Component::kPodResources, "PodResources List failed (failing for {}): {}",
              Seconds(st_now.list_failing_for), list.status().message());
    }
    // Without an answering List nothing can be "unlisted": the checkpoint
    // (the kubelet's own record) stands as it is.
    view.entries = checkpointed;
    if (st_now.list_failing_for < options_.list_failure_bound) {
      view.complete = false;
      view.incomplete_reason =
          absl::StrCat("PodResources List failing for ", Seconds(st_now.list_failing_for), ": ",
                       list.status().message());
    } else {
      // Bounded: past it the kubelet's own record (or nothing) is the view.
      view.proves_absence = checkpoint.ok();
      st_now.not_ready_reason =
          absl::StrCat("PodResources List failing for ", Seconds(st_now.list_failing_for), " (",
                       list.status().message(), "); ",
                       checkpoint.ok() ? "holds come from the kubelet checkpoint alone"
                                       : "no holds are known and grants lapse after their TTL");
    }
  } else if (checkpoint.ok()) {
    view.entries = checkpointed;  // no PodResources API here: the checkpoint stands
  } else {
    have_view = false;
  }
  st_now.complete = view.complete;
  st_now.incomplete_reason = view.incomplete_reason;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    status_ = st_now;
  }
  if (have_view) {
    sink_(view);
  } else if (no_source_) {
    no_source_();
  }
  if (after_round_) after_round_();
}

}  // namespace fabric::holds
