// Extend / prefill attention on CDNA MFMA (gfx90a, gfx94x; wave64), variant amd_mfma:
// v_mfma_f32_16x16x16_f16 / _bf16 through clang's __builtin_amdgcn_mfma_f32_16x16x16f16 and
// __builtin_amdgcn_mfma_f32_16x16x16bf16_1k (f16 or bf16 KV; f32 accumulators). The body is
// extend_amd_mm.clh; operand layout (AMD CDNA2 / CDNA3 ISA, "Matrix Arithmetic Instructions";
// AMD matrix instruction calculator), lane l, n = l % 16, g = l / 16:
//   A: A[n][4g .. 4g + 3]; B: B[4g .. 4g + 3][n]; C/D: 4 floats, element i = D[4g + i][n].
// EMULATE_AMD_MFMA (tests on other devices): amd_mfma_emul.clh instead of the builtins.
#include "common.clh"

#define MM_WAVE 64
#define MM_FK 4
#define MM_KOFS(g) (4 * (g))
#define MM_NACC 4
#define MM_ROW(e, g) (4 * (g) + (e))
#define MM_KERNEL extend_mfma_amd
typedef ushort4 mm_frag;
typedef float4 mm_acc;
#define MM_LOAD(p) vload4(0, p)
#define MM_STORE(acc, arr) vstore4(acc, 0, arr)
#define MM_LOADF(arr) vload4(0, arr)

#ifdef EMULATE_AMD_MFMA
#include "amd_mfma_emul.clh"
#define MM_SCRATCH AMD_MFMA_EMUL_SCRATCH
#define MM(a, b, c) amd_mfma16_emul(a, b, c, KV_DT == DT_BF16, mm_scr, lid)
#else
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#if KV_DT == DT_BF16
#define MM(a, b, c) __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(as_short4(a), as_short4(b), c, 0, 0, 0)
#else
#define MM(a, b, c) __builtin_amdgcn_mfma_f32_16x16x16f16(as_half4(a), as_half4(b), c, 0, 0, 0)
#endif
#endif

#include "extend_amd_mm.clh"
