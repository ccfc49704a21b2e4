// Environment variables (all clattn ones start with CLATTN_).
#pragma once
#include <cstdlib>
#include <string>

namespace clattn::rt {
inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
}  // namespace clattn::rt
