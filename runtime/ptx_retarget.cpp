#include "runtime/ptx_retarget.hpp"

#include <cstdlib>
#include <regex>

namespace clattn::rt {

std::optional<std::string> retarget_ptx_sm90a(const std::string& ptx, int maxnreg) {
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
  out = std::regex_replace(out, target, ".target sm_90a", std::regex_constants::format_first_only);
  if (maxnreg > 0) {
    // Performance directives sit between an entry's parameter list and its body.
    static const std::regex entry(R"((\.entry\s+\w+\s*\([^)]*\)[^{]*)\{)");
    out = std::regex_replace(out, entry, "$1.maxnreg " + std::to_string(maxnreg) + "\n{");
  }
  return out;
}

int ptx_maxnreg_option(const std::string& options) {
  const size_t at = options.find(kPtxMaxnregDefine);
  if (at == std::string::npos) return 0;
  return std::atoi(options.c_str() + at + std::char_traits<char>::length(kPtxMaxnregDefine));
}

}  // namespace clattn::rt
