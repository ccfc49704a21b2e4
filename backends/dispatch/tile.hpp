// A tile: the values of a variant's tunables by name (its kernel's -D names). The op reads the
// chosen tile back for its launch geometry and work list; the probe prints it; the tile cache
// keeps it.
#pragma once
#include <map>
#include <optional>
#include <string>

namespace clattn::ops {

using Tile = std::map<std::string, int>;
std::string tile_text(const Tile& t);                        // "KEYS=32 ROWS=16 WG=64"
std::optional<Tile> parse_tile(const std::string& text);    // tile_text's inverse
// t[name], or `fallback` where the tile has no such knob.
inline int knob(const Tile& t, const std::string& name, int fallback = 0) {
  const auto it = t.find(name);
  return it == t.end() ? fallback : it->second;
}

}  // namespace clattn::ops
