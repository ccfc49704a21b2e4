// On-disk program binary cache. Entries are written atomically (temp + rename); every entry
// carries its key and a checksum, and is ignored (logged) when damaged, foreign or writable
// by others: the cache is a code-loading path.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace clattn::rt {

class DiskCache {
 public:
  // Resolves the directory from CLATTN_CACHE_DIR / XDG_CACHE_HOME / HOME; "off" disables.
  DiskCache();
  explicit DiskCache(std::string dir);  // "" disables

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string path_for(const std::string& key) const;

  std::optional<std::vector<unsigned char>> load(const std::string& key) const;
  void store(const std::string& key, const std::vector<unsigned char>& binary) const;

  // The directory the environment selects ("" when disabled).
  static std::string default_dir();

 private:
  void prepare();
  std::string dir_;
};

}  // namespace clattn::rt
