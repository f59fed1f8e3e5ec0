#include "agent/base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace fabric {
namespace {

constexpr std::array<std::string_view, 14> kNames = {
    "agent",        "discovery", "config", "plugin", "registration", "health", "metrics",
    "podresources", "cdi",       "cni",    "sim",    "tool",         "dra",    "pods"};

struct LogState {
  std::mutex mu;
  LogSink sink;
  std::array<std::shared_ptr<spdlog::logger>, kNames.size()> loggers;

  LogState() {
    // stderr only: stdout belongs to programs' results (CNI, CLI -o json).
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    for (size_t i = 0; i < kNames.size(); ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(std::string(kNames[i]), console);
      loggers[i]->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%L%$ [%n] %v",
                              spdlog::pattern_time_type::utc);
    }
    LogLevel level = LogLevel::kInfo;
    if (const char* env = std::getenv("FABRIC_LOG_LEVEL")) ParseLogLevel(env, &level);
    SetLevelLocked(level);
  }

  void SetLevelLocked(LogLevel level) {
    for (auto& l : loggers) l->set_level(ToSpd(level));
  }

  static spdlog::level::level_enum ToSpd(LogLevel l) {
    switch (l) {
      case LogLevel::kDebug:
        return spdlog::level::debug;
      case LogLevel::kInfo:
        return spdlog::level::info;
      case LogLevel::kWarn:
        return spdlog::level::warn;
      case LogLevel::kError:
        return spdlog::level::err;
    }
    return spdlog::level::info;
  }
};

LogState& State() {
  static LogState* state = new LogState();  // never destroyed: safe during exit
  return *state;
}

}  // namespace

std::string_view ComponentName(Component c) { return kNames[static_cast<size_t>(c)]; }

void LogMessage(Component c, LogLevel level, std::string_view msg) {
  LogState& s = State();
  s.loggers[static_cast<size_t>(c)]->log(LogState::ToSpd(level), "{}", msg);
  LogSink sink;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    sink = s.sink;
  }
  if (sink) sink(c, level, msg);
}

void SetLogLevel(LogLevel level) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.SetLevelLocked(level);
}

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "debug")
    *out = LogLevel::kDebug;
  else if (s == "info")
    *out = LogLevel::kInfo;
  else if (s == "warn" || s == "warning")
    *out = LogLevel::kWarn;
  else if (s == "error")
    *out = LogLevel::kError;
  else
    return false;
  return true;
}

void SetLogSink(LogSink sink) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

}  // namespace fabric
