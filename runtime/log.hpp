// The library's spdlog logger ("clattn"), level from CLATTN_LOG_LEVEL (default warn; a value
// that is not a level is reported through the logger, which then logs at warn).
#pragma once
#include <spdlog/spdlog.h>

namespace clattn::rt {
// Built at the first call (the first message), unless an engine registered "clattn" first.
spdlog::logger& log();
}
