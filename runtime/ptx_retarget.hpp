// Rebuilding an NVIDIA OpenCL program's PTX for sm_90a (Hopper's architecture-specific
// target, the only one with wgmma). NVIDIA's OpenCL compiler always writes `.target sm_90`,
// and its program binaries are that PTX text, which clCreateProgramWithBinary takes back.
// Kernels write each sm_90a-only instruction after a "//@" PTX comment marker (so the first,
// sm_90 build assembles a comment) and ask for the rebuild with the build option
// -DCLATTN_PTX_SM90A=1; ProgramCache then builds again from the patched PTX.
#pragma once
#include <optional>
#include <string>

namespace clattn::rt {

// The build-option define that asks for the rebuild.
inline constexpr const char* kPtxSm90aOption = "-DCLATTN_PTX_SM90A=1";
// With it, -DCLATTN_PTX_MAXNREG=N caps every entry's registers (PTX .maxnreg), which NVIDIA's
// OpenCL compiler offers no option for (-cl-nv-maxrregcount is accepted and ignored): the
// register count decides how many warps fit on a multiprocessor.
inline constexpr const char* kPtxMaxnregDefine = "-DCLATTN_PTX_MAXNREG=";

// `ptx` with every "//@" marker removed, `.target sm_90` changed to `.target sm_90a` and, when
// maxnreg > 0, `.maxnreg maxnreg` added to every entry; nullopt when it is not sm_90 PTX
// (another device or driver: the caller reports a build failure and the op falls back to its
// next variant).
std::optional<std::string> retarget_ptx_sm90a(const std::string& ptx, int maxnreg = 0);

// N of -DCLATTN_PTX_MAXNREG=N in `options`, 0 when absent.
int ptx_maxnreg_option(const std::string& options);

}  // namespace clattn::rt
