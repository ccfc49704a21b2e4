// Reads the figures the Intel graphics compiler (IGC, through ocloc) records per kernel in the
// OpenCL program binary: an ELF whose "Intel(R) OpenCL Device Binary" section holds the
// patch-token format (IGC's patch_list.h / patch_shared.h): a program header, then per kernel a
// header, its name, its ISA (the kernel heap) and its patch tokens. The tokens read here:
// EXECUTION_ENVIRONMENT (23: compiled SIMD width, GRF count), MEDIA_VFE_STATE (18) and its slot 1
// (55: scratch space per thread, where spills go), ALLOCATE_LOCAL_SURFACE (15: SLM) and
// ALLOCATE_STATELESS_PRIVATE_MEMORY (38: private memory per thread).
#include "tools/kernel_report/intel_binary.hpp"

#include <cstring>

namespace clattn::kreport {
namespace {

template <class T>
bool get(const std::vector<unsigned char>& b, size_t off, T* v) {
  if (off + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + off, sizeof(T));
  return true;
}

constexpr uint32_t kMagic = 0x494E5443;  // "INTC"
constexpr size_t kProgramHeader = 28, kKernelHeader = 40, kItemHeader = 8;

// The device-binary section of the ELF container; empty when absent.
std::vector<unsigned char> device_section(const std::vector<unsigned char>& elf) {
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (elf.size() < 64 || std::memcmp(elf.data(), "\x7f" "ELF", 4) != 0) return {};
  get(elf, 0x28, &shoff), get(elf, 0x3A, &shentsize), get(elf, 0x3C, &shnum), get(elf, 0x3E, &shstrndx);
  auto section = [&](uint16_t i, uint32_t* name, uint64_t* off, uint64_t* size) {
    const size_t h = size_t(shoff) + size_t(i) * shentsize;
    return get(elf, h, name) && get(elf, h + 0x18, off) && get(elf, h + 0x20, size);
  };
  uint32_t sn = 0;
  uint64_t stroff = 0, strsize = 0;
  if (shstrndx >= shnum || !section(shstrndx, &sn, &stroff, &strsize)) return {};
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t name = 0;
    uint64_t off = 0, size = 0;
    if (!section(i, &name, &off, &size) || stroff + name >= elf.size()) continue;
    const char* n = reinterpret_cast<const char*>(elf.data() + stroff + name);
    if (std::strstr(n, "Device Binary") && off + size <= elf.size())
      return std::vector<unsigned char>(elf.begin() + long(off), elf.begin() + long(off + size));
  }
  return {};
}

}  // namespace

std::vector<IntelKernel> parse_intel_binary(const std::vector<unsigned char>& file, std::string* error) {
  std::vector<IntelKernel> out;
  const std::vector<unsigned char> b = device_section(file);
  uint32_t magic = 0, nkernels = 0, plist = 0;
  if (b.empty() || !get(b, 0, &magic) || magic != kMagic) {
    *error = "no patch-token device binary in the ocloc output (zebin is not read)";
    return out;
  }
  get(b, 16, &nkernels), get(b, 24, &plist);
  size_t pos = kProgramHeader + plist;
  for (uint32_t k = 0; k < nkernels; ++k) {
    uint32_t name_size = 0, patch_size = 0, heap = 0, gsh = 0, dsh = 0, ssh = 0;
    if (!get(b, pos + 12, &name_size) || !get(b, pos + 16, &patch_size) || !get(b, pos + 20, &heap) ||
        !get(b, pos + 24, &gsh) || !get(b, pos + 28, &dsh) || !get(b, pos + 32, &ssh)) {
      *error = "truncated kernel header";
      return out;
    }
    IntelKernel ik;
    size_t p = pos + kKernelHeader;
    if (p + name_size + heap > b.size()) {
      *error = "truncated kernel";
      return out;
    }
    ik.name.assign(reinterpret_cast<const char*>(b.data() + p), strnlen(reinterpret_cast<const char*>(b.data() + p), name_size));
    p += name_size;
    ik.isa.assign(b.begin() + long(p), b.begin() + long(p + heap));
    p += size_t(heap) + gsh + dsh + ssh;
    const size_t end = p + patch_size;
    while (p + kItemHeader <= end) {
      uint32_t token = 0, size = 0;
      get(b, p, &token), get(b, p + 4, &size);
      if (size < kItemHeader) break;
      auto u32 = [&](int i) {
        uint32_t v = 0;
        get(b, p + kItemHeader + 4 * size_t(i), &v);
        return v;
      };
      switch (token) {
        case 23: ik.simd = int(u32(3)), ik.grf = int(u32(20)); break;  // LargestCompiledSIMDSize, NumGRFRequired
        case 18: ik.scratch += u32(1); break;                          // PerThreadScratchSpace (slot 0)
        case 55: ik.scratch += u32(1); break;                          // (slot 1)
        case 15: ik.slm = u32(1); break;                               // TotalInlineLocalMemorySize
        case 38: ik.private_bytes = u32(3); break;                     // PerThreadPrivateMemorySize
        default: break;
      }
      p += size;
    }
    pos = end;
    out.push_back(std::move(ik));
  }
  return out;
}

}  // namespace clattn::kreport
