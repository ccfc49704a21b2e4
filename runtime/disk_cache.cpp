#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/env.hpp"
#include "runtime/log.hpp"
#include "runtime/sha256.hpp"

namespace clattn::rt {
namespace {

constexpr char kMagic[8] = {'C', 'L', 'A', 'T', 'T', 'N', 'P', 'C'};
constexpr uint32_t kFormat = 1;
constexpr size_t kKeyLen = 64;
// magic, format, key, checksum, binary size
constexpr size_t kHeader = 8 + 4 + kKeyLen + 64 + 8;
constexpr uint64_t kMaxBinary = 1ull << 31;

// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  void reset(int fd) { if (fd_ >= 0) ::close(fd_); fd_ = fd; }
  explicit operator bool() const { return fd_ >= 0; }
 private:
  int fd_;
};

std::string checksum(const std::string& key, const unsigned char* bin, size_t n) {
  Sha256 h;
  h.update(key);
  h.update(bin, n);
  return h.hex();
}

// Keys are SHA-256 hex digests; anything else could name a path outside the directory.
bool valid_key(const std::string& key) {
  if (key.size() != kKeyLen) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool mkdir_p(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
    if (i < path.size()) cur += path[i];
  }
  return true;
}

// Why `st` cannot hold the cache directory as an ancestor ("" if it can): another user
// owns it, or group/others may write it without the sticky bit, so they could swap what
// it contains.
std::string ancestor_problem(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) return "is owned by uid " + std::to_string(st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return "is writable by group or others without the sticky bit";
  return {};
}

// Opens the resolved absolute directory `real` from "/" one component at a time, never
// following a symlink, and checks each component as an ancestor. -1 (logged) on failure.
int open_ancestors(const std::string& real) {
  Fd fd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string at = "/";
  size_t i = 0;
  while (fd) {
    struct stat st {};
    std::string why = ::fstat(fd.get(), &st) != 0 ? std::strerror(errno) : ancestor_problem(st);
    if (!why.empty()) {
      log().warn("program cache: parent directory {} {}; disk cache off", at, why);
      return -1;
    }
    while (i < real.size() && real[i] == '/') ++i;
    if (i == real.size()) return fd.release();
    size_t end = real.find('/', i);
    if (end == std::string::npos) end = real.size();
    std::string name = real.substr(i, end - i);
    at += (at.size() > 1 ? "/" : "") + name;
    i = end;
    fd.reset(::openat(fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  const int e = errno;  // (log() may set errno: the first call builds the logger)
  log().warn("program cache: cannot open parent directory {} ({}); disk cache off", at, std::strerror(e));
  return -1;
}

// Why directory `st` cannot be a private directory of ours ("" if it can, once its read
// and search bits for group and others are cleared).
std::string dir_problem(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "is writable by group or others";
  return {};
}

// The cache directory must be ours and private. A directory that group or others may
// write is shared, so it is refused; one that is only readable by them (a mkdir under
// umask 022) is tightened to 0700.
bool private_dir(int fd, const std::string& dir) {
  struct stat st {};
  std::string why = ::fstat(fd, &st) != 0 ? std::strerror(errno) : dir_problem(st);
  if (!why.empty()) {
    log().warn("program cache: {} {}; disk cache off", dir, why);
    return false;
  }
  if ((st.st_mode & 07777) != 0700) {
    if (::fchmod(fd, 0700) != 0) {
      const int e = errno;
      log().warn("program cache: cannot make {} private ({}); disk cache off", dir, std::strerror(e));
      return false;
    }
    log().warn("program cache: {} was mode {:04o}; made private (0700)", dir, st.st_mode & 07777);
  }
  return true;
}

// Opens `dir` (created 0700 with its missing parents) as a trusted directory: its parents
// resolved and checked as ancestors, the directory itself opened without following a
// symlink at its path. -1 (logged) when anything is not trusted.
int open_cache_dir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  size_t slash = dir.rfind('/');
  std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
  std::string leaf = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (leaf.empty() || leaf == "." || leaf == "..") {
    log().warn("program cache: {} does not name a directory of its own; disk cache off", dir);
    return -1;
  }
  char real[PATH_MAX];
  if (!mkdir_p(parent) || !::realpath(parent.c_str(), real)) {
    const int e = errno;
    log().warn("program cache: cannot create {} ({}); disk cache off", parent, std::strerror(e));
    return -1;
  }
  Fd up(open_ancestors(real));
  if (!up) return -1;
  if (::mkdirat(up.get(), leaf.c_str(), 0700) != 0 && errno != EEXIST) {
    const int e = errno;
    log().warn("program cache: cannot create {} ({}); disk cache off", dir, std::strerror(e));
    return -1;
  }
  Fd fd(::openat(up.get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    int e = errno;
    struct stat st {};
    bool link = ::fstatat(up.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    log().warn("program cache: cannot open {} ({}); disk cache off", dir,
               link ? "a symbolic link, which is not followed" : std::strerror(e));
    return -1;
  }
  return private_dir(fd.get(), dir) ? fd.release() : -1;
}

// Why file `st` cannot be loaded as code ("" if it can): anything but a regular file owned
// by us (or, where `root_ok`, by root) that group and others cannot write could be someone
// else's code.
std::string file_problem(const struct stat& st, bool root_ok = false) {
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != ::geteuid() && !(root_ok && st.st_uid == 0))
    return "owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others";
  return {};
}

bool trusted(const struct stat& st, const std::string& what) {
  std::string why = file_problem(st);
  if (!why.empty()) log().warn("program cache: ignoring {} ({})", what, why);
  return why.empty();
}

bool read_all(int fd, unsigned char* p, size_t n) {
  while (n) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool write_all(int fd, const unsigned char* p, size_t n) {
  while (n) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

std::string entry_name(const std::string& key) { return key + ".clbin"; }

// One path component: never a way out of the directory it is looked up in.
bool plain_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

// Why openat(dirfd, name, ...O_NOFOLLOW) failed with errno `e`, in words.
std::string open_error(int dirfd, const std::string& name, int e) {
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return "a symbolic link, which is not followed";
  return std::strerror(e);
}

// Writes `name` in the directory `dirfd` (called `dir` in warnings) atomically: an O_EXCL
// temp file made 0600, renamed over the name (a symlink planted there is replaced, never
// written through). "" on success, else why not.
std::string write_atomic(int dirfd, const std::string& dir, const std::string& name, const unsigned char* p,
                         size_t n) {
  static std::atomic<unsigned long> seq{0};
  const std::string tmp = name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq.fetch_add(1));
  {
    Fd fd(::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return "cannot create " + dir + "/" + tmp + " (" + std::strerror(errno) + ")";
    if (::fchmod(fd.get(), 0600) != 0 || !write_all(fd.get(), p, n)) {
      std::string why = "cannot write " + dir + "/" + tmp + " (" + std::strerror(errno) + ")";
      ::unlinkat(dirfd, tmp.c_str(), 0);
      return why;
    }
  }
  if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0) {
    std::string why = "cannot rename " + tmp + " -> " + name + " in " + dir + " (" + std::strerror(errno) + ")";
    ::unlinkat(dirfd, tmp.c_str(), 0);
    return why;
  }
  return {};
}

// The whole of the open, checked file `fd` if it is at most `max_bytes`; nullopt (logged).
std::optional<std::string> read_checked(int fd, const struct stat& st, size_t max_bytes, const char* tag,
                                        const std::string& path) {
  if (uint64_t(st.st_size) > max_bytes) {
    log().warn("{}: ignoring {} (larger than {} bytes)", tag, path, max_bytes);
    return std::nullopt;
  }
  std::string text(size_t(st.st_size), '\0');
  if (!read_all(fd, reinterpret_cast<unsigned char*>(text.data()), text.size())) {
    log().warn("{}: cannot read {} (truncated or unreadable)", tag, path);
    return std::nullopt;
  }
  return text;
}

}  // namespace

std::string DiskCache::default_dir() {
  std::string d = env("CLATTN_CACHE_DIR");
  if (d == "off" || d == "0") return {};
  if (!d.empty()) return d;
  std::string base = env("XDG_CACHE_HOME");
  if (base.empty()) {
    std::string home = env("HOME");
    if (home.empty()) return {};
    base = home + "/.cache";
  }
  return base + "/clattn/" + CLATTN_VERSION_STRING;
}

DiskCache::DiskCache() : dir_(default_dir()) { prepare(); }
DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) { prepare(); }
DiskCache::~DiskCache() {
  if (dirfd_ >= 0) ::close(dirfd_);
}

void DiskCache::prepare() {
  if (dir_.empty()) return;
  dirfd_ = open_cache_dir(dir_);
  if (dirfd_ < 0) dir_.clear();
}

std::string DiskCache::path_for(const std::string& key) const { return dir_ + "/" + entry_name(key); }

std::optional<std::vector<unsigned char>> DiskCache::load(const std::string& key) const {
  if (dirfd_ < 0 || !valid_key(key)) return std::nullopt;
  const std::string path = path_for(key);
  // O_NONBLOCK: a FIFO planted under the entry's name must not block the open.
  Fd fd(::openat(dirfd_, entry_name(key).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ELOOP) log().warn("program cache: ignoring {} (a symbolic link)", path);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !trusted(st, path)) return std::nullopt;
  if (uint64_t(st.st_size) < kHeader || uint64_t(st.st_size) > kHeader + kMaxBinary) {
    log().warn("program cache: {} has a bad size; rebuilding", path);
    return std::nullopt;
  }
  std::vector<unsigned char> file(size_t(st.st_size));
  if (!read_all(fd.get(), file.data(), file.size())) {
    log().warn("program cache: {} is truncated or unreadable; rebuilding", path);
    return std::nullopt;
  }
  const unsigned char* h = file.data();
  uint32_t format = 0;
  uint64_t size = 0;
  std::memcpy(&format, h + 8, 4);
  std::memcpy(&size, h + 8 + 4 + kKeyLen + 64, 8);
  if (std::memcmp(h, kMagic, 8) != 0 || format != kFormat || std::memcmp(h + 12, key.data(), kKeyLen) != 0) {
    log().warn("program cache: {} has a bad header; rebuilding", path);
    return std::nullopt;
  }
  if (size != file.size() - kHeader) {
    log().warn("program cache: {} is truncated or has trailing bytes; rebuilding", path);
    return std::nullopt;
  }
  std::vector<unsigned char> bin(file.begin() + kHeader, file.end());
  if (checksum(key, bin.data(), bin.size()).compare(0, 64, reinterpret_cast<const char*>(h + 12 + kKeyLen), 64) != 0) {
    log().warn("program cache: {} fails its checksum; rebuilding", path);
    return std::nullopt;
  }
  return bin;
}

void DiskCache::store(const std::string& key, const std::vector<unsigned char>& bin) const {
  if (dirfd_ < 0 || bin.empty() || bin.size() > kMaxBinary || !valid_key(key)) return;
  std::vector<unsigned char> file(kHeader);
  const uint32_t format = kFormat;
  const uint64_t size = bin.size();
  const std::string sum = checksum(key, bin.data(), bin.size());
  std::memcpy(file.data(), kMagic, 8);
  std::memcpy(file.data() + 8, &format, 4);
  std::memcpy(file.data() + 12, key.data(), kKeyLen);
  std::memcpy(file.data() + 12 + kKeyLen, sum.data(), 64);
  std::memcpy(file.data() + 12 + kKeyLen + 64, &size, 8);
  file.insert(file.end(), bin.begin(), bin.end());
  std::string why = write_atomic(dirfd_, dir_, entry_name(key), file.data(), file.size());
  if (!why.empty()) log().warn("program cache: {}", why);
}

namespace {
bool note_suffix(const std::string& s) {
  if (s.size() < 2 || s.size() > 16 || s[0] != '.' || s == ".clbin") return false;
  for (size_t i = 1; i < s.size(); ++i)
    if (!(s[i] >= 'a' && s[i] <= 'z')) return false;
  return true;
}
}  // namespace

std::optional<std::string> DiskCache::load_note(const std::string& key, const std::string& suffix,
                                                size_t max_bytes) const {
  if (dirfd_ < 0 || !valid_key(key) || !note_suffix(suffix)) return std::nullopt;
  const std::string name = key + suffix, path = dir_ + "/" + name;
  Fd fd(::openat(dirfd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int e = errno;
    if (e != ENOENT) log().warn("program cache: ignoring {} ({})", path, open_error(dirfd_, name, e));
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !trusted(st, path)) return std::nullopt;
  return read_checked(fd.get(), st, max_bytes, "program cache", path);
}

void DiskCache::store_note(const std::string& key, const std::string& suffix, const std::string& text) const {
  if (dirfd_ < 0 || !valid_key(key) || !note_suffix(suffix)) return;
  std::string why = write_atomic(dirfd_, dir_, key + suffix, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
  if (!why.empty()) log().warn("program cache: {}", why);
}

std::optional<std::string> DiskCache::read_file(const std::string& sub, const std::string& name, size_t max_bytes,
                                                const char* tag) const {
  if (dirfd_ < 0 || !plain_name(sub) || !plain_name(name)) return std::nullopt;
  const std::string subdir = dir_ + "/" + sub, path = subdir + "/" + name;
  Fd d(::openat(dirfd_, sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) {
    const int e = errno;
    if (e != ENOENT) log().warn("{}: ignoring {} ({})", tag, subdir, open_error(dirfd_, sub, e));
    return std::nullopt;
  }
  struct stat st {};
  std::string why = ::fstat(d.get(), &st) != 0 ? std::strerror(errno) : dir_problem(st);
  if (!why.empty()) {
    log().warn("{}: ignoring {} (the directory {} {})", tag, path, subdir, why);
    return std::nullopt;
  }
  // O_NONBLOCK: a FIFO planted under the name must not block the open.
  Fd fd(::openat(d.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int e = errno;
    if (e != ENOENT) log().warn("{}: ignoring {} ({})", tag, path, open_error(d.get(), name, e));
    return std::nullopt;
  }
  why = ::fstat(fd.get(), &st) != 0 ? std::strerror(errno) : file_problem(st);
  if (!why.empty()) {
    log().warn("{}: ignoring {} ({})", tag, path, why);
    return std::nullopt;
  }
  return read_checked(fd.get(), st, max_bytes, tag, path);
}

std::string DiskCache::write_file(const std::string& sub, const std::string& name, const std::string& data) const {
  if (dirfd_ < 0) return "no trusted cache directory";
  if (!plain_name(sub) || !plain_name(name)) return "'" + sub + "/" + name + "' is not a name inside " + dir_;
  const std::string subdir = dir_ + "/" + sub;
  if (::mkdirat(dirfd_, sub.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + subdir + " (" + std::strerror(errno) + ")";
  Fd d(::openat(dirfd_, sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) return "cannot open " + subdir + " (" + open_error(dirfd_, sub, errno) + ")";
  struct stat st {};
  std::string why = ::fstat(d.get(), &st) != 0 ? std::strerror(errno) : dir_problem(st);
  if (!why.empty()) return subdir + " " + why;
  if ((st.st_mode & 07777) != 0700 && ::fchmod(d.get(), 0700) != 0)
    return "cannot make " + subdir + " private (" + std::strerror(errno) + ")";
  return write_atomic(d.get(), subdir, name, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

std::optional<std::string> read_trusted_file(const std::string& path, size_t max_bytes, const char* tag) {
  // Symlinks followed: the user named this path. O_NONBLOCK: a FIFO must not block.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int e = errno;
    if (e != ENOENT) log().warn("{}: cannot open {} ({})", tag, path, std::strerror(e));
    return std::nullopt;
  }
  struct stat st {};
  std::string why = ::fstat(fd.get(), &st) != 0 ? std::strerror(errno) : file_problem(st, /*root_ok=*/true);
  if (!why.empty()) {
    log().warn("{}: ignoring {} ({})", tag, path, why);
    return std::nullopt;
  }
  return read_checked(fd.get(), st, max_bytes, tag, path);
}

std::string write_private_file(const std::string& path, const std::string& data) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  const std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
  if (!plain_name(name)) return "'" + path + "' does not name a file";
  if (!mkdir_p(dir)) return "cannot create " + dir + " (" + std::strerror(errno) + ")";
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) return "cannot open " + dir + " (" + std::strerror(errno) + ")";
  return write_atomic(d.get(), dir, name, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

}  // namespace clattn::rt
