// Hopper TMA tensor maps of a K and a V source, built on the device: the 128-byte map format is
// the driver's, and NVIDIA's OpenCL has no cuTensorMapEncodeTiled, but PTX (sm_90a) can set
// every field of a zeroed map with tensormap.replace (the way Triton builds maps on the GPU).
// The maps are then copied to global memory with the proxy fence that makes them usable by
// cp.async.bulk.tensor in later kernels (which acquire them first, TMAP_ACQUIRE).
//
// Both maps: rank 4, 16-bit elements (the copy only moves bytes, so f16 and bf16 alike), dims
// innermost first d0 x d1 x d2 x d3 with byte strides s1, s2, s3 of dims 1..3, box 64 x b1 x b2
// x 1 (64 values = one 128-byte row), element strides 1, no interleave, 128-byte swizzle (the
// layout wgmma reads through wg_desc_sw128), out-of-bounds elements read as zero.
// Every instruction is hidden behind "//@" (mma_ptx_nv.clh): built with CLATTN_PTX_SM90A.

__kernel __attribute__((reqd_work_group_size(32, 1, 1))) void tma_maps(__global const void* k, __global const void* v,
                                                                      __global uint* maps, uint d0, uint d1, uint d2,
                                                                      uint d3, ulong s1, ulong s2, ulong s3, uint b1,
                                                                      uint b2) {
  __local uint tm[3 * 32];  // two maps at a 128-byte aligned address
  const int lane = get_local_id(0);
  const uint lo = (uint)(size_t)tm, a0 = (lo + 127u) & ~127u;
  __local uint* t = tm + (a0 - lo) / 4;
  t[lane] = 0u, t[32 + lane] = 0u;
  asm volatile("bar.warp.sync -1;" ::: "memory");
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint a = a0 + 128u * m;
      const ulong g = (ulong)(size_t)(m ? v : k);
#define TM_SET(FIELD, IMM) \
  asm volatile("//@tensormap.replace.tile." FIELD ".shared::cta.b1024.b32 [%0], " #IMM ";" ::"r"(a) : "memory")
#define TM_SET_ORD(FIELD, ORD, VAL)                                                                          \
  asm volatile("//@tensormap.replace.tile." FIELD ".shared::cta.b1024.b32 [%0], " #ORD ", %1;" ::"r"(a), "r"(VAL) \
               : "memory")
#define TM_STRIDE(ORD, VAL)                                                                                   \
  asm volatile("//@tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], " #ORD ", %1;" ::"r"(a), \
               "l"(VAL)                                                                                        \
               : "memory")
      asm volatile("//@tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;" ::"r"(a), "l"(g)
                   : "memory");
      TM_SET("rank", 3);  // rank - 1
      TM_SET_ORD("box_dim", 0, 64u);
      TM_SET_ORD("box_dim", 1, b1);
      TM_SET_ORD("box_dim", 2, b2);
      TM_SET_ORD("box_dim", 3, 1u);
      TM_SET_ORD("global_dim", 0, d0);
      TM_SET_ORD("global_dim", 1, d1);
      TM_SET_ORD("global_dim", 2, d2);
      TM_SET_ORD("global_dim", 3, d3);
      TM_STRIDE(0, s1);
      TM_STRIDE(1, s2);
      TM_STRIDE(2, s3);
      TM_SET_ORD("element_stride", 0, 1u);
      TM_SET_ORD("element_stride", 1, 1u);
      TM_SET_ORD("element_stride", 2, 1u);
      TM_SET_ORD("element_stride", 3, 1u);
      TM_SET("elemtype", 1);         // 16-bit unsigned
      TM_SET("interleave_layout", 0);  // none
      TM_SET("swizzle_mode", 3);     // 128 bytes
      TM_SET("fill_mode", 0);       // zeros
#undef TM_SET
#undef TM_SET_ORD
#undef TM_STRIDE
    }
  }
  asm volatile("bar.warp.sync -1;" ::: "memory");
#pragma unroll
  for (int m = 0; m < 2; ++m)
    asm volatile(
        "//@tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;" ::"l"(
            (ulong)(size_t)(maps + 32 * m)),
        "r"(a0 + 128u * m)
        : "memory");
}
