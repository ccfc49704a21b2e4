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
  log().warn("program cache: cannot open parent directory {} ({}); disk cache off", at, std::strerror(errno));
  return -1;
}

// The cache directory itself must be ours and private. A directory that group or others
// may write is shared, so it is refused; one that is only readable by them (a mkdir under
// umask 022) is tightened to 0700.
bool private_dir(int fd, const std::string& dir) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    log().warn("program cache: {} is not a directory; disk cache off", dir);
    return false;
  }
  if (st.st_uid != ::geteuid()) {
    log().warn("program cache: {} is owned by uid {}, not {}; disk cache off", dir, st.st_uid, ::geteuid());
    return false;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    log().warn("program cache: {} is writable by group or others; disk cache off", dir);
    return false;
  }
  if ((st.st_mode & 07777) != 0700) {
    if (::fchmod(fd, 0700) != 0) {
      log().warn("program cache: cannot make {} private ({}); disk cache off", dir, std::strerror(errno));
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
    log().warn("program cache: cannot create {} ({}); disk cache off", parent, std::strerror(errno));
    return -1;
  }
  Fd up(open_ancestors(real));
  if (!up) return -1;
  if (::mkdirat(up.get(), leaf.c_str(), 0700) != 0 && errno != EEXIST) {
    log().warn("program cache: cannot create {} ({}); disk cache off", dir, std::strerror(errno));
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

// Owner-only and owned by us: anything else could be someone else's code.
bool trusted(const struct stat& st, const std::string& what) {
  if (!S_ISREG(st.st_mode)) {
    log().warn("program cache: ignoring {} (not a regular file)", what);
    return false;
  }
  if (st.st_uid != ::geteuid()) {
    log().warn("program cache: ignoring {} (owned by uid {}, not {})", what, st.st_uid, ::geteuid());
    return false;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    log().warn("program cache: ignoring {} (writable by group or others)", what);
    return false;
  }
  return true;
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
  static std::atomic<unsigned long> seq{0};
  const std::string name = entry_name(key);
  const std::string tmp = name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq.fetch_add(1));
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
  {
    // O_EXCL: never write through a name someone else prepared.
    Fd fd(::openat(dirfd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) {
      log().warn("program cache: cannot create {}/{} ({})", dir_, tmp, std::strerror(errno));
      return;
    }
    if (::fchmod(fd.get(), 0600) != 0 || !write_all(fd.get(), file.data(), file.size())) {
      log().warn("program cache: cannot write {}/{} ({})", dir_, tmp, std::strerror(errno));
      ::unlinkat(dirfd_, tmp.c_str(), 0);
      return;
    }
  }
  if (::renameat(dirfd_, tmp.c_str(), dirfd_, name.c_str()) != 0) {
    log().warn("program cache: cannot rename {} -> {} in {} ({})", tmp, name, dir_, std::strerror(errno));
    ::unlinkat(dirfd_, tmp.c_str(), 0);
  }
}

}  // namespace clattn::rt
