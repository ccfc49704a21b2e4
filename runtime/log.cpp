#include "runtime/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>

#include "runtime/env.hpp"

namespace clattn::rt {

namespace {
// What CLATTN_LOG_LEVEL takes (case-insensitive; spdlog also reads "warning" and "err").
constexpr const char* kLevels = "trace debug info warn error critical off";
}  // namespace

spdlog::logger& log() {
  // Built once; registered under "clattn" so an embedding engine can re-route it.
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("clattn");
    if (existing) return existing;
    auto l = spdlog::stderr_color_mt("clattn");
    l->set_pattern("[clattn %L] %v");
    const std::string raw = env("CLATTN_LOG_LEVEL");
    std::string name = raw;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    const auto level = name.empty() ? spdlog::level::warn : spdlog::level::from_str(name);
    // from_str answers "off" for any name it does not know: a typo must not silence the log.
    const bool unknown = level == spdlog::level::off && name != "off";
    l->set_level(unknown ? spdlog::level::warn : level);
    if (unknown) l->warn("CLATTN_LOG_LEVEL='{}' is not a level (one of: {}); logging at warn", raw, kLevels);
    return l;
  }();
  return *logger;
}

}  // namespace clattn::rt
