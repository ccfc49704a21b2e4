// On-disk program binary cache. Entries are written atomically (temp + rename); every entry
// carries its key and a checksum, and is ignored (logged) when damaged, foreign, writable
// by others or not a regular file: the cache is a code-loading path. The directory is
// opened once without following a symlink at its own path, checked with its ancestors,
// and every entry is then read and written relative to that descriptor.
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
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // False when disabled or when the directory was not trusted (logged).
  bool enabled() const { return dirfd_ >= 0; }
  const std::string& dir() const { return dir_; }
  std::string path_for(const std::string& key) const;

  std::optional<std::vector<unsigned char>> load(const std::string& key) const;
  void store(const std::string& key, const std::vector<unsigned char>& binary) const;

  // The directory the environment selects ("" when disabled).
  static std::string default_dir();

 private:
  void prepare();
  std::string dir_;
  int dirfd_ = -1;
};

}  // namespace clattn::rt
