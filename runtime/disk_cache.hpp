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

  // A small text note kept beside entry `key` as <key><suffix> (".verdict": the program's
  // self-validation verdict, backends/dispatch/self_validation.hpp), read under the entries'
  // rules (opened without following a link, a regular file of ours that group and others
  // cannot write, at most `max_bytes`) and written as they are (0600 temp file, renamed).
  // nullopt when absent (quietly) or refused (logged). `suffix`: '.' and letters.
  std::optional<std::string> load_note(const std::string& key, const std::string& suffix, size_t max_bytes) const;
  void store_note(const std::string& key, const std::string& suffix, const std::string& text) const;

  // Other code-loading input kept in the cache (tuned/<device>.json), under the entries'
  // rules: `sub` opened without following a link and not writable by group or others, the
  // file opened without following a link, a regular file of ours that group and others
  // cannot write, at most `max_bytes`. nullopt when absent (quietly) or refused (logged as
  // "`tag`: ignoring ...").
  std::optional<std::string> read_file(const std::string& sub, const std::string& name, size_t max_bytes,
                                       const char* tag) const;
  // Writes `sub`/`name` so that read_file trusts it: `sub` created 0700 (or made 0700 when
  // only readable by others), an O_EXCL temp file 0600 renamed over `name`. "" on
  // success, else why not.
  std::string write_file(const std::string& sub, const std::string& name, const std::string& data) const;

  // The directory the environment selects ("" when disabled).
  static std::string default_dir();

 private:
  void prepare();
  std::string dir_;
  int dirfd_ = -1;
};

// A code-loading file the user named (CLATTN_TUNED_FILE): symlinks are followed, since the
// user chose the path, but the file itself must be a regular file owned by the effective
// user or root that group and others cannot write, at most `max_bytes`. nullopt when
// absent (quietly) or refused (logged as "`tag`: ignoring ...").
std::optional<std::string> read_trusted_file(const std::string& path, size_t max_bytes, const char* tag);

// Writes `path` atomically with mode 0600 (O_EXCL temp file in its directory, renamed over
// it; missing parent directories are created 0700). "" on success, else why not.
std::string write_private_file(const std::string& path, const std::string& data);

}  // namespace clattn::rt
