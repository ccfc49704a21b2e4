// The library's spdlog logger ("clattn"), level from CLATTN_LOG_LEVEL (default warn).
#pragma once
#include <spdlog/spdlog.h>

namespace clattn::rt {
spdlog::logger& log();
}
