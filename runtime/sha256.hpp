// SHA-256 (FIPS 180-4) for program-cache keys and entry checksums.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace clattn::rt {

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t n);
  Sha256& update(const std::string& s) { return update(s.data(), s.size()); }
  std::array<uint8_t, 32> digest();
  std::string hex();  // lower-case hex of digest()

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_ = 0;
  size_t used_ = 0;
};

}  // namespace clattn::rt
