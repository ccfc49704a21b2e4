// clattn-kernel-report: the offline build gate's pieces (targets, compiler drivers, reports).
#pragma once
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"

namespace clattn::kreport {

// A GPU the report compiles for: the profile clattn would read off it (so the ops pick that
// vendor's and architecture's parameter rows and variants) and how its offline compiler is
// invoked.
struct Target {
  std::string name;        // "dg2", "gfx1100", ...
  std::string compiler;    // "ocloc" or "amdgcn"
  std::string device;      // ocloc -device / clang -mcpu
  std::string iga;         // iga64 -p= (Intel)
  std::string about;       // the GPU it stands for
  ops::CatalogTarget ops;  // the profile and device figures the ops read
};

const std::vector<Target>& all_targets();

// One compiled kernel's figures. Fields a compiler does not report stay -1.
struct KernelFigures {
  std::string kernel;
  int simd = -1;            // Intel: the SIMD width IGC compiled (8, 16, 32)
  int grf = -1;             // Intel: GRF registers per thread (128 or 256)
  long scratch = -1;        // bytes per thread (Intel: scratch space) or per lane (AMD)
  long private_bytes = -1;  // Intel: stateless private memory per thread
  int vgpr = -1, agpr = -1, sgpr = -1;  // AMD
  int vgpr_spill = -1, sgpr_spill = -1; // AMD
  int occupancy = -1;       // AMD: waves per SIMD
  long lds = -1;            // local memory per work-group (AMD LDS, Intel SLM), bytes
  bool spills() const;      // spills to memory (scratch space > 0)
};

// One program compiled for one target.
struct Build {
  bool ok = false;
  std::string log;                        // compiler output on failure
  std::vector<std::string> warnings;      // the compiler's warning lines (a build passes with none)
  std::vector<KernelFigures> kernels;
  std::vector<std::string> matrix_lines;  // disassembly lines with matrix instructions
};

// Compiles `source` (the program text with includes expanded) for `t`, in `work_dir`.
Build compile(const Target& t, const std::string& source, const std::string& options, const std::string& work_dir);

// Which tools a target needs, and whether they are installed ("" = all present).
std::string missing_tools(const Target& t);

// Runs `cmd` through the shell; returns its exit status and puts stdout+stderr in *out.
int run_command(const std::string& cmd, std::string* out);

}  // namespace clattn::kreport
