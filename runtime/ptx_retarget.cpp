#include "runtime/ptx_retarget.hpp"

#include <regex>

namespace clattn::rt {

std::optional<std::string> retarget_ptx_sm90a(const std::string& ptx) {
  static const std::regex target(R"(\.target\s+sm_90\b)");
  const std::string text(ptx.c_str());  // binaries may carry a trailing NUL
  if (!std::regex_search(text, target)) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "//@") == 0) {
      i += 3;
      continue;
    }
    out += text[i++];
  }
  return std::regex_replace(out, target, ".target sm_90a", std::regex_constants::format_first_only);
}

}  // namespace clattn::rt
