// Drives the vendors' offline compilers: Intel's ocloc (figures from the program binary,
// iga64 for the ISA) and clang-15's amdgcn target with the ROCm device libraries (figures from
// -Rpass-analysis=kernel-resource-usage, llvm-objdump-15 for the ISA).
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "tools/kernel_report/intel_binary.hpp"
#include "tools/kernel_report/report.hpp"

namespace fs = std::filesystem;

namespace clattn::kreport {
namespace {

const char* kAmdBitcode = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";  // Debian's rocm-device-libs

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool have(const char* tool) {
  std::string out;
  return run_command(std::string("command -v ") + tool, &out) == 0;
}

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), {});
}

// The gfx target's ISA version as the device libraries spell it (gfx90a -> 90a, gfx1100 -> 1100).
std::string isa_suffix(const std::string& gfx) { return gfx.substr(3); }

// A device-library directory for clang: Debian's bitcode, plus oclc_isa_version_<n>.bc for
// targets it lacks (gfx11: one constant, __oclc_ISA_version, generated from a sibling's file).
std::string amd_libs(const std::string& work_dir, const std::string& gfx, std::string* error) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const fs::path dir = fs::path(work_dir) / "amdgcn-bitcode";
  const std::string isa = isa_suffix(gfx);
  const fs::path want = dir / ("oclc_isa_version_" + isa + ".bc");
  if (fs::exists(want)) return dir.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const auto& e : fs::directory_iterator(kAmdBitcode, ec)) {
    const fs::path link = dir / e.path().filename();
    if (!fs::exists(link)) fs::create_symlink(e.path(), link, ec);
  }
  if (fs::exists(want)) return dir.string();
  // The ISA version number: major, minor, stepping as decimal digits (gfx1100 -> 11000).
  const std::string number = isa.size() == 4 ? isa + "0" : "";
  std::string text;
  if (number.empty() ||
      run_command("llvm-dis-15 " + quote(std::string(kAmdBitcode) + "/oclc_isa_version_1030.bc") + " -o -", &text) != 0) {
    *error = "no device library for " + gfx + " and none could be made (llvm-dis-15 / llvm-as-15)";
    return "";
  }
  text = std::regex_replace(text, std::regex("constant i32 10300"), "constant i32 " + number);
  const fs::path ll = dir / ("oclc_isa_version_" + isa + ".ll");
  std::ofstream(ll) << text;
  std::string out;
  if (run_command("llvm-as-15 " + quote(ll.string()) + " -o " + quote(want.string()), &out) != 0) {
    *error = "llvm-as-15 failed: " + out;
    return "";
  }
  return dir.string();
}

int field(const std::string& line, const char* name) {
  const size_t at = line.find(name);
  if (at == std::string::npos) return -1;
  return std::atoi(line.c_str() + at + std::strlen(name));
}

// The compiler's warnings ("file:line:col: warning: ..."), one line each. ocloc's register
// spill notes ("... spilled around N") are not among them: the spill figures report those.
std::vector<std::string> warning_lines(const std::string& out) {
  std::vector<std::string> w;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.find("warning:") != std::string::npos && line.find(" spilled around ") == std::string::npos)
      w.push_back(line);
  return w;
}

Build compile_amd(const Target& t, const fs::path& dir, const std::string& options) {
  Build b;
  std::string err;
  const std::string libs = amd_libs(dir.parent_path().string(), t.device, &err);
  if (libs.empty()) {
    b.log = err;
    return b;
  }
  const fs::path obj = dir / "k.o";
  const std::string cmd = "clang-15 -x cl -target amdgcn-amd-amdhsa -mcpu=" + t.device + " -O3 " + options +
                          " --rocm-path=/usr --rocm-device-lib-path=" + quote(libs) +
                          " -Rpass-analysis=kernel-resource-usage -c " + quote((dir / "k.cl").string()) + " -o " +
                          quote(obj.string());
  std::string out;
  const int rc = run_command(cmd, &out);
  if (rc != 0 || !fs::exists(obj)) {
    b.log = out;
    return b;
  }
  b.ok = true;
  b.warnings = warning_lines(out);
  std::istringstream in(out);
  KernelFigures* k = nullptr;
  for (std::string line; std::getline(in, line);) {
    if (line.find("remark:") == std::string::npos) continue;
    const size_t fn = line.find("Function Name: ");
    if (fn != std::string::npos) {
      b.kernels.emplace_back();
      k = &b.kernels.back();
      k->kernel = line.substr(fn + 15);
      k->kernel = k->kernel.substr(0, k->kernel.find(' '));
      continue;
    }
    if (!k) continue;
    if (line.find("VGPRs Spill:") != std::string::npos) k->vgpr_spill = field(line, "VGPRs Spill: ");
    else if (line.find("SGPRs Spill:") != std::string::npos) k->sgpr_spill = field(line, "SGPRs Spill: ");
    else if (line.find("VGPRs:") != std::string::npos) k->vgpr = field(line, "VGPRs: ");
    else if (line.find("AGPRs:") != std::string::npos) k->agpr = field(line, "AGPRs: ");
    else if (line.find("SGPRs:") != std::string::npos) k->sgpr = field(line, "SGPRs: ");
    else if (line.find("ScratchSize") != std::string::npos) k->scratch = field(line, "]: ");
    else if (line.find("Occupancy") != std::string::npos) k->occupancy = field(line, "]: ");
    else if (line.find("LDS Size") != std::string::npos) k->lds = field(line, "]: ");
  }
  std::string dis;
  if (run_command("llvm-objdump-15 -d " + quote(obj.string()), &dis) == 0) {
    std::istringstream d(dis);
    for (std::string line; std::getline(d, line);)
      if (line.find("v_wmma") != std::string::npos || line.find("v_mfma") != std::string::npos)
        b.matrix_lines.push_back(line.substr(line.find_first_not_of(" \t")));
  }
  return b;
}

Build compile_intel(const Target& t, const fs::path& dir, const std::string& options) {
  Build b;
  const std::string cmd = "ocloc compile -file " + quote((dir / "k.cl").string()) + " -device " + t.device +
                          " -options " + quote(options) + " -out_dir " + quote(dir.string()) + " -output k";
  std::string out;
  const int rc = run_command(cmd, &out);
  fs::path bin;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".bin") bin = e.path();
  if (rc != 0 || bin.empty()) {
    b.log = out;
    return b;
  }
  b.warnings = warning_lines(out);
  std::string err;
  const std::vector<IntelKernel> ks = parse_intel_binary(read_bytes(bin), &err);
  if (ks.empty()) {
    b.log = err.empty() ? "no kernels in " + bin.string() : err;
    return b;
  }
  b.ok = true;
  for (const IntelKernel& ik : ks) {
    KernelFigures k;
    k.kernel = ik.name, k.simd = ik.simd, k.grf = ik.grf, k.scratch = ik.scratch, k.private_bytes = ik.private_bytes;
    k.lds = ik.slm;
    b.kernels.push_back(k);
    if (t.iga.empty() || ik.isa.empty()) continue;
    const fs::path krn = dir / (ik.name + ".krn");
    std::ofstream(krn, std::ios::binary).write(reinterpret_cast<const char*>(ik.isa.data()), long(ik.isa.size()));
    std::string dis;
    run_command("iga64 -d -p=" + t.iga + " " + quote(krn.string()), &dis);
    std::istringstream d(dis);
    for (std::string line; std::getline(d, line);)
      if (line.find("dpas") != std::string::npos) b.matrix_lines.push_back(line.substr(line.find_first_not_of(" \t")));
  }
  return b;
}

}  // namespace

// Spills that reach memory: scratch space (Intel: register spills; AMD: spilled VGPRs or a private
// array). AMD VGPR spills into AGPRs (CDNA) and SGPR spills into VGPR lanes stay on chip and
// are reported, not counted.
bool KernelFigures::spills() const { return scratch > 0; }

int run_command(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string missing_tools(const Target& t) {
  std::vector<const char*> need;
  if (t.compiler == "ocloc") need = {"ocloc", "iga64"};
  else need = {"clang-15", "llvm-objdump-15", "llvm-dis-15", "llvm-as-15"};
  std::string miss;
  for (const char* n : need)
    if (!have(n)) miss += (miss.empty() ? "" : ", ") + std::string(n);
  if (t.compiler == "amdgcn" && !fs::exists(kAmdBitcode))
    miss += (miss.empty() ? "" : ", ") + std::string(kAmdBitcode) + " (rocm-device-libs)";
  return miss;
}

Build compile(const Target& t, const std::string& source, const std::string& options, const std::string& work_dir) {
  static std::atomic<int> seq{0};
  const fs::path dir = fs::path(work_dir) / (t.name + "-" + std::to_string(seq++));
  fs::create_directories(dir);
  std::ofstream(dir / "k.cl") << source;
  return t.compiler == "ocloc" ? compile_intel(t, dir, options) : compile_amd(t, dir, options);
}

}  // namespace clattn::kreport
