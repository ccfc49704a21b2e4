#include "runtime/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "runtime/env.hpp"

namespace clattn::rt {

spdlog::logger& log() {
  // Built once; registered under "clattn" so an embedding engine can re-route it.
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto existing = spdlog::get("clattn");
    if (existing) return existing;
    auto l = spdlog::stderr_color_mt("clattn");
    l->set_pattern("[clattn %L] %v");
    std::string lvl = env("CLATTN_LOG_LEVEL");
    l->set_level(lvl.empty() ? spdlog::level::warn : spdlog::level::from_str(lvl));
    return l;
  }();
  return *logger;
}

}  // namespace clattn::rt
