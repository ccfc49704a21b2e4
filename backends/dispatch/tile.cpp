#include "backends/dispatch/tile.hpp"

#include <sstream>

namespace clattn::ops {

std::string tile_text(const Tile& t) {
  std::string s;
  for (const auto& [k, v] : t) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

std::optional<Tile> parse_tile(const std::string& text) {
  Tile t;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    try {
      size_t used = 0;
      const std::string v = item.substr(eq + 1);
      t[item.substr(0, eq)] = std::stoi(v, &used);
      if (used != v.size()) return std::nullopt;
    } catch (...) {
      return std::nullopt;
    }
  }
  return t;
}

}  // namespace clattn::ops
