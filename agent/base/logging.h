// Logging facade over spdlog: a fixed set of named component loggers and
// fmt-style functions. Nothing outside logging.cc includes spdlog.
#ifndef FABRIC_AGENT_BASE_LOGGING_H_
#define FABRIC_AGENT_BASE_LOGGING_H_

#include <fmt/format.h>

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/string_view.h"

// Debian 12's absl::string_view is its own type (not std::string_view); let
// fmt print it (e.g. absl::Status::message()).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace fabric {

enum class Component {
  kAgent,
  kDiscovery,
  kConfig,
  kPlugin,
  kRegistration,
  kHealth,
  kMetrics,
  kPodResources,
  kCdi,
  kCni,
  kSim,
  kTool,
  kDra,
  kPods,  // Pod conditions, Events and the authenticated /v1/pods
};

enum class LogLevel { kDebug, kInfo, kWarn, kError };

std::string_view ComponentName(Component c);

// Writes one line for component `c`. Thread-safe.
void LogMessage(Component c, LogLevel level, std::string_view msg);

// Minimum level printed (default info; FABRIC_LOG_LEVEL=debug|info|warn|error).
void SetLogLevel(LogLevel level);
// Parses "debug", "info", "warn", "error"; returns false on anything else.
bool ParseLogLevel(std::string_view s, LogLevel* out);

// Sends every log line to `sink` as well as stderr (tests capture with it);
// nullptr removes it.
using LogSink = std::function<void(Component, LogLevel, std::string_view)>;
void SetLogSink(LogSink sink);

template <typename... Args>
void LogDebug(Component c, fmt::format_string<Args...> f, Args&&... args) {
  LogMessage(c, LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogInfo(Component c, fmt::format_string<Args...> f, Args&&... args) {
  LogMessage(c, LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarn(Component c, fmt::format_string<Args...> f, Args&&... args) {
  LogMessage(c, LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogError(Component c, fmt::format_string<Args...> f, Args&&... args) {
  LogMessage(c, LogLevel::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_LOGGING_H_
