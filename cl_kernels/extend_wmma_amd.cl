// Extend / prefill attention on RDNA3 WMMA (gfx11, wave32), variant amd_wmma:
// v_wmma_f32_16x16x16_f16 / _bf16 through clang's __builtin_amdgcn_wmma_f32_16x16x16_{f16,bf16}_w32
// (f16 or bf16 KV; f32 accumulators). The body is extend_amd_mm.clh; operand layout (AMD RDNA3
// ISA reference guide, "Wave Matrix Multiply Accumulate"; GPUOpen, "How to accelerate AI
// applications on RDNA 3 using WMMA"), lane l, n = l % 16, g = l / 16:
//   A: row n of A, all 16 k; B: column n of B, all 16 k (lanes 16..31 repeat lanes 0..15);
//   C/D: 8 floats, element e = D[2e + g][n].
// EMULATE_AMD_WMMA (tests on other devices): amd_wmma_emul.clh instead of the builtins.
#include "common.clh"

#define MM_WAVE 32
#define MM_FK 16
#define MM_KOFS(g) 0
#define MM_NACC 8
#define MM_ROW(e, g) (2 * (e) + (g))
#define MM_KERNEL extend_wmma_amd
typedef ushort16 mm_frag;
typedef float8 mm_acc;
#define MM_LOAD(p) vload16(0, p)
#define MM_STORE(acc, arr) vstore8(acc, 0, arr)
#define MM_LOADF(arr) vload8(0, arr)

#ifdef EMULATE_AMD_WMMA
#include "amd_wmma_emul.clh"
#define MM_SCRATCH AMD_WMMA_EMUL_SCRATCH
#define MM(a, b, c) amd_wmma_emul(a, b, c, KV_DT == DT_BF16, mm_scr, lid)
#else
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#if KV_DT == DT_BF16
#define MM(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(as_short16(a), as_short16(b), c)
#else
#define MM(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(as_half16(a), as_half16(b), c)
#endif
#endif

#include "extend_amd_mm.clh"
