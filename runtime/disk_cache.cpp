#include "runtime/disk_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "runtime/env.hpp"
#include "runtime/log.hpp"
#include "runtime/sha256.hpp"

namespace clattn::rt {
namespace {

constexpr char kMagic[8] = {'C', 'L', 'A', 'T', 'T', 'N', 'P', 'C'};
constexpr uint32_t kFormat = 1;

std::string checksum(const std::string& key, const unsigned char* bin, size_t n) {
  Sha256 h;
  h.update(key);
  h.update(bin, n);
  return h.hex();
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

// Owner-only and owned by us: anything else could be someone else's code.
bool trusted(const struct stat& st, const std::string& what) {
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

void DiskCache::prepare() {
  if (dir_.empty()) return;
  if (!mkdir_p(dir_)) {
    log().warn("program cache: cannot create {} ({}); disk cache off", dir_, std::strerror(errno));
    dir_.clear();
    return;
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !trusted(st, "directory " + dir_)) {
    log().warn("program cache: {} is not a private directory; disk cache off", dir_);
    dir_.clear();
  }
}

std::string DiskCache::path_for(const std::string& key) const { return dir_ + "/" + key + ".clbin"; }

std::optional<std::vector<unsigned char>> DiskCache::load(const std::string& key) const {
  if (dir_.empty()) return std::nullopt;
  std::string path = path_for(key);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (!trusted(st, path)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint32_t format = 0;
  uint64_t size = 0;
  char key_in[64], sum[64];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&format), 4);
  in.read(key_in, 64);
  in.read(sum, 64);
  in.read(reinterpret_cast<char*>(&size), 8);
  if (!in || std::memcmp(magic, kMagic, 8) != 0 || format != kFormat || key.compare(0, 64, key_in, 64) != 0 ||
      size > (1ull << 31)) {
    log().warn("program cache: {} has a bad header; rebuilding", path);
    return std::nullopt;
  }
  std::vector<unsigned char> bin(size);
  in.read(reinterpret_cast<char*>(bin.data()), std::streamsize(size));
  if (!in || in.peek() != EOF) {
    log().warn("program cache: {} is truncated or has trailing bytes; rebuilding", path);
    return std::nullopt;
  }
  if (checksum(key, bin.data(), bin.size()).compare(0, 64, sum, 64) != 0) {
    log().warn("program cache: {} fails its checksum; rebuilding", path);
    return std::nullopt;
  }
  return bin;
}

void DiskCache::store(const std::string& key, const std::vector<unsigned char>& bin) const {
  if (dir_.empty() || bin.empty()) return;
  std::string path = path_for(key);
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(reinterpret_cast<uintptr_t>(&bin));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      log().warn("program cache: cannot write {}", tmp);
      return;
    }
    ::chmod(tmp.c_str(), 0600);
    uint32_t format = kFormat;
    uint64_t size = bin.size();
    std::string sum = checksum(key, bin.data(), bin.size());
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&format), 4);
    out.write(key.data(), 64);
    out.write(sum.data(), 64);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(bin.data()), std::streamsize(bin.size()));
    if (!out) {
      log().warn("program cache: short write to {}", tmp);
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    log().warn("program cache: cannot rename {} -> {}", tmp, path);
    std::remove(tmp.c_str());
  }
}

}  // namespace clattn::rt
