// Paged decode attention: one query token per request against its paged K/V.
//
// Work-group = one work item of the planner (request, KV chunk [begin, end)) x one KV head
// x one block of up to GMAX query heads of that head's GQA group, so each K/V row is
// loaded once for the whole block. The WGSIZE work-items form NSLOT = WGSIZE/TPT token
// slots of TPT lanes; a slot's lanes split a row into LOAD_BYTES loads (lane tl takes
// loads tl, tl+TPT, ...). Each step of the tile loop scores UNROLL tokens per slot (the
// tile: NSLOT*UNROLL consecutive tokens), sums each slot's partial dot products across
// its lanes with a butterfly, and updates the slot's online softmax once per tile:
// one max and one rescale per tile, one exp2 per token and head. Scores live in log2
// space (q is pre-scaled by sm_scale * k_scale * log2(e)). After the loop the slots'
// states are merged through local memory in slot order (deterministic) and the work-group
// writes o/lse (whole request) or a partial state for the merge pass (split-K).
//
// The butterfly is inline PTX shfl.sync on NVIDIA (USE_PTX_SHFL=1), sub-group xor shuffles
// (USE_SUBGROUP=2: cl_intel_subgroups; USE_SUBGROUP=1 with SG_SHUFFLE=1: cl_khr_subgroups +
// cl_khr_subgroup_shuffle), the local-memory butterfly fenced per sub-group (USE_SUBGROUP=1,
// SG_SHUFFLE=0: cl_khr_subgroups alone) or the same butterfly through local memory with
// work-group barriers elsewhere: all add the partner's value to one's own in the same order,
// so they give bit-identical sums and the PoCL runs cover the vendor math. The sub-group
// forms number the lanes in sub-group order (the mapping of work-items to sub-groups is
// implementation-defined): lane position = sub-group id x max sub-group size + sub-group
// local id, a permutation of the local ids when every sub-group is full (the host requires
// WGSIZE to be a multiple of the sub-group size and TPT to divide it).
//
// Build options (-D): HEAD_DIM, KV_DT (dtype code), GMAX (query heads per group block),
// TPT, WGSIZE, UNROLL, LOAD_BYTES (16/8/4), USE_PTX_SHFL, USE_SUBGROUP (0 none, 1 khr, 2
// intel), SG_SHUFFLE, SG_SIZE (the sub-group size: Intel's required size where SG_REQD, the
// emulated size), SG_REQD, UNROLL_HINTS (GPU compilers), FP8_FAST (fp8 decode through f32 denormals), FUSE_MERGE
// (split-K: the last work-group of a request merges its partial states, no second launch),
// SPARSE (per-head page lists with page lengths, HSA). KV_DT = DT_I8 (int8 caches): each
// token's score is scaled by its K row's scale and its softmax weight by its V row's before
// they meet V (the scales: sc_* arguments; PREFETCH and SPARSE are 0 in these builds).
// KV_DT = DT_I4 (int4 caches, QGROUP = quant_group): a lane's load lies inside one group, so
// each load of K and V comes with its group's scale and zero point; the nibbles are read as
// the f32 2^23 + u (no conversion instruction) and 2^23 + zero is subtracted, giving u - zero
// exactly; the load's partial dot product takes its K scale before the lanes' sum, and the
// softmax weight its V scale per load (same PREFETCH / SPARSE restriction).
// Everything else (page size, strides, lengths, flags, q/o dtypes) is a kernel argument.
#include "common.clh"
#include "kernel_args.clh"
#define MERGE_WS_QUAL volatile const  // parts written by other work-groups of this launch
#include "merge_parts.clh"

#ifndef FUSE_MERGE
#define FUSE_MERGE 0
#endif
// PREFETCH: the next tile's K and V rows are loaded into a second register set while this
// tile is computed, so an iteration waits for memory only when the loads take longer than
// the math (short chunks: split-K, small batches).
#ifndef PREFETCH
#define PREFETCH 0
#endif
// SPARSE (HSA sparse decode, ops/hsa.cpp): a work item with a nonzero list stride (field 7)
// reads its own page list: one per KV head (SPARSE=1) or per head block (SPARSE=2, GMAX=1:
// per query head) at page_base + list * stride, and a key of it counts only when its
// offset in the page lies in the entry's slot range, stored nlists * stride entries further
// as lo << 16 | hi (empty for a void or repeated entry). Items with stride 0 read the
// shared list as without SPARSE.
#ifndef SPARSE
#define SPARSE 0
#endif
#define SPARSE_SLOT_KEPT(off, w) ((off) >= ((w) >> 16) && (off) < ((w) & 0xffff))
#if SPARSE && PREFETCH
#error "SPARSE builds take PREFETCH=0"
#endif

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#ifndef GMAX
#define GMAX 4
#endif
#ifndef TPT
#define TPT 8
#endif
#ifndef WGSIZE
#define WGSIZE 128
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef LOAD_BYTES
#define LOAD_BYTES 16
#endif
#ifndef USE_PTX_SHFL
#define USE_PTX_SHFL 0
#endif
#ifndef USE_SUBGROUP
#define USE_SUBGROUP 0
#endif
#ifndef SG_SHUFFLE
#define SG_SHUFFLE 1
#endif
#ifndef SG_REQD
#define SG_REQD 0
#endif
// No `#pragma OPENCL EXTENSION` for cl_khr_subgroups / cl_khr_subgroup_shuffle: their builtins
// need none, and Intel's compiler (sub-groups as an OpenCL C 3.0 feature) warns on it.
// Intel: the sub-group size the parameters ask for (cl_intel_required_subgroup_size).
#if USE_SUBGROUP == 2 && SG_REQD && !defined(EMULATE_INTEL_SUBGROUPS)
#define SG_SIZE_ATTR __attribute__((intel_reqd_sub_group_size(SG_SIZE)))
#elif USE_SUBGROUP
#define SG_SIZE_ATTR
#else
#define SG_SIZE_ATTR SIMD_ATTR  // (the device's SIMD choice, common.clh)
#endif

#if KV_DT == DT_F32
#define KV_ESIZE 4
#define WORD_ELEM WORD_ELEM_F32
#elif KV_DT == DT_F16
#define KV_ESIZE 2
#define WORD_ELEM WORD_ELEM_F16
#elif KV_DT == DT_BF16
#define KV_ESIZE 2
#define WORD_ELEM WORD_ELEM_BF16
#elif KV_DT == DT_E4M3
#define KV_ESIZE 1
#elif KV_DT == DT_I8
#define KV_ESIZE 1
// Signed byte e of a 32-bit word times ELEM_SCALE(e), with no int -> float conversion (I2F
// runs at 1/8 of the FMA rate on NVIDIA): one LOP makes the f32 2^23 + (b + 128) x 256^(e & 1)
// (bits 0x4B000000 | (byte ^ 0x80), bytes 0 and 2 at bits 0-7, 1 and 3 at bits 8-15 of the
// word or of the word >> 16: one shift per word), and one FADD takes 2^23 + 128 x 256^(e & 1)
// off, exactly. q carries 1 / ELEM_SCALE, and the V accumulators drop it at the end.
#define I8_HALF(w, e) ((e) < 2 ? (w) : ((w) >> 16))
#define WORD_ELEM(w, e)                                                                          \
  (as_float((I8_HALF(w, e) & (0xFFu << 8 * ((e)&1))) ^ (0x4B000000u | (0x80u << 8 * ((e)&1)))) - \
   ((e)&1 ? 8421376.0f : 8388736.0f))
#define ELEM_SCALE(e) ((e)&1 ? 256.0f : 1.0f)
#elif KV_DT == DT_I4
#define KV_ESIZE 1
#define KV_EPB 2  // elements per byte
// Nibble e of a 32-bit word as the f32 2^23 + nibble x ELEM_SCALE(e): one LOP (its bits
// 0x4B000000 | nibble, nibbles 0-3 in place, 4-7 from the word >> 16: one shift per word),
// no int -> float conversion. The group's 2^23 + zero x ELEM_SCALE(e) comes off after, so
// the FADD leaves (u - zero) x 16^(e & 3) exactly; q carries 1 / ELEM_SCALE and the V
// accumulators drop it at the end.
#define WORD_ELEM(w, e) as_float(0x4B000000u | (((e) < 4 ? (w) : ((w) >> 16)) & (15u << 4 * ((e)&3))))
#define ELEM_SCALE(e) ((float)(1 << 4 * ((e)&3)))
#else
#define KV_ESIZE 1
#endif
#ifndef KV_EPB
#define KV_EPB 1
#endif
#ifndef ELEM_SCALE
#define ELEM_SCALE(e) 1.0f  // the power of two an unpacked element carries (int8, int4)
#endif
#if KV_DT == DT_I4
#define KV_I4 1
#if PREFETCH || SPARSE
#error "int4 builds take PREFETCH=0 and SPARSE=0"
#endif
#ifndef QGROUP
#define QGROUP 64
#endif
#else
#define KV_I4 0
#endif
#if KV_DT == DT_I8
#define KV_I8 1
#if PREFETCH || SPARSE
#error "int8 builds take PREFETCH=0 and SPARSE=0"
#endif
#else
#define KV_I8 0
#endif

// fp8: with FP8_FAST the rows are read raw (common.clh: value * 2^-RAW_EXP). The
// power of two goes half into q and half onto each score (so neither q nor the products
// leave the normal f32 range), and whole onto the softmax weights before they multiply V.
#ifndef FP8_FAST
#define FP8_FAST 0
#endif

#if KV_DT == DT_E4M3 || KV_DT == DT_E5M2
#if FP8_FAST
#define RAW_FP8 1
#if KV_DT == DT_E4M3
#define WORD_ELEM WORD_ELEM_E4M3_RAW
#define RAW_HALF 0x1p60f
#define RAW_FULL 0x1p120f
#else
#define WORD_ELEM WORD_ELEM_E5M2_RAW
#define RAW_HALF 0x1p56f
#define RAW_FULL 0x1p112f
#endif
#else
#if KV_DT == DT_E4M3
#define WORD_ELEM WORD_ELEM_E4M3
#else
#define WORD_ELEM WORD_ELEM_E5M2
#endif
#endif
#endif
#ifndef RAW_FP8
#define RAW_FP8 0
#define RAW_HALF 1.0f
#define RAW_FULL 1.0f
#endif
// Lazy online-softmax rescaling threshold (log2 units): softmax weights stay below
// 2^RESCALE_SLACK. Raw fp8 weights carry RAW_FULL (up to 2^120) as well, so 4 keeps them
// inside the f32 range.
#ifndef RESCALE_SLACK
#if RAW_FP8
#define RESCALE_SLACK 4.0f
#else
#define RESCALE_SLACK 8.0f
#endif
#endif

#define LOAD_WORDS (LOAD_BYTES / 4)
#define EPW (4 * KV_EPB / KV_ESIZE)          // elements per 32-bit word
#define VEC (LOAD_BYTES * KV_EPB / KV_ESIZE) // elements per load
#define KV_BYTES_OF(n) ((n) * KV_ESIZE / KV_EPB)  // bytes of n elements (int4: n even)
#define NCHUNK (HEAD_DIM / VEC)              // loads per row
#define NCH ((NCHUNK + TPT - 1) / TPT)       // loads per lane per row
#define EL (NCH * VEC)                       // elements per lane
#define NSLOT (WGSIZE / TPT)
#define TILE (NSLOT * UNROLL)
#define NSCORE (UNROLL * GMAX)
#define FULL_CHUNKS ((NCHUNK % TPT) == 0)    // every lane's loads are all inside the row

#include "decode_lanes.clh"
#if TPT > 1 && !USE_PTX_SHFL && !(USE_SUBGROUP && SG_SHUFFLE)
#define SCR_FLOATS RED_FLOATS
#else
#define SCR_FLOATS 1
#endif
#define MERGE_FLOATS (NSLOT * HEAD_DIM + 2 * NSLOT * GMAX)
#define LMEM_FLOATS (SCR_FLOATS > MERGE_FLOATS ? SCR_FLOATS : MERGE_FLOATS)
#if KV_I4 && (QGROUP % VEC)
#error "int4: a load must lie inside one quantisation group (QGROUP a multiple of VEC)"
#endif

// tab layout (int32): work items of 8 at work_off: {req, begin, end, part, page_base,
// token_offset, merge, list stride (SPARSE; else 0)}; req < 0: no work (a fixed-capacity
// plan's unused slot, refresh_decode_work in metadata.cl). part < 0: the item is the whole request, write o/lse; else write
// the partial state to workspace row `part` (ws_o [P, Hq, D] f32, ws_lse at lse_off).
// FUSE_MERGE: `merge` indexes the merge entries {req, first, count, 0} at merge_off, and
// counters[counter_off + merge * num_groups(1) + group(1)] (the run's counter set in the
// plan's table, ops::CounterSets) counts the finished parts of that request and head block;
// the work-group that finishes last merges them and resets the counter to 0 for the set's
// next run (the plan uploads it as 0).
// Page ids are clamped into [0, num_pages) (POOL_PAGE: one min per key; the host makes
// plans with keys only for caches of at least one page), so bad metadata never reads
// outside K/V; an id that needed it sets CLATTN_FAULT_PAGE_ID in *faults.
// Token j of a request's key list sits at list slot token_offset + j, i.e. page
// page_ids[page_base + (slot >> log2_page)], offset slot & (page_size - 1).
__kernel __attribute__((reqd_work_group_size(WGSIZE, 1, 1))) SG_SIZE_ATTR
void paged_decode(DECODE_KERNEL_ARGS) {
  __local float lmem[LMEM_FLOATS] __attribute__((aligned(16)));  // float4 reads in slot_allreduce
#if FUSE_MERGE
  __local int is_last;
#endif
  const int lid = get_local_id(0);
#if USE_SUBGROUP
  const int pos = (int)(SG_ID() * SG_MAX_SIZE() + SG_LOCAL_ID());
#else
  const int pos = lid;
#endif
  const int tl = pos % TPT, slot = pos / TPT;
  __global const int* wk = tab + work_off + 8 * (int)get_group_id(0);
  const int req = wk[0], begin = wk[1], end = wk[2], part = wk[3], tok_off = wk[5];
  if (req < 0) return;  // an unused slot of a fixed-capacity plan (the whole work-group)
  const int kvh = (int)get_group_id(1) / n_hblk, hblk = (int)get_group_id(1) % n_hblk;
#if SPARSE
  const int lstride = wk[7];
  const int list = SPARSE == 2 ? (int)get_group_id(1) : kvh;
  const int nlists = SPARSE == 2 ? (int)get_num_groups(1) : (int)get_num_groups(1) / n_hblk;
  const int page_base = wk[4] + list * lstride;
  const int lens_at = page_base + nlists * lstride;
#define KEEP_KEY(ls) (lstride == 0 || SPARSE_SLOT_KEPT((ls) & pmask, page_ids[lens_at + ((ls) >> log2_page)]))
#else
  const int page_base = wk[4];
#define KEEP_KEY(ls) 1
#endif
  const int h0 = kvh * group + hblk * GMAX;
  const int ng = min(GMAX, group - hblk * GMAX);
  const int pmask = (1 << log2_page) - 1;
  const long head_off = (long)kvh * stride_head;
  // Per-KV-head scales (has_hs) on top of the per-tensor ones.
  const float qs_h = q_scale * (has_hs ? k_hs[kvh] : 1.0f), vs_h = v_scale * (has_hs ? v_hs[kvh] : 1.0f);

  // q rows of the block, pre-scaled; padding heads and loads past the row are zero. Four
  // elements per load (load4_bits), every load issued before any conversion.
  float qr[GMAX][EL];
#if VEC % 4 == 0
  {
    uint4 qb[GMAX][EL / 4];
UNROLL_LOOP
    for (int g = 0; g < GMAX; ++g)
UNROLL_LOOP
      for (int j = 0; j < NCH; ++j) {
        const int c = tl + j * TPT;
        const bool in_row = FULL_CHUNKS || c < NCHUNK;  // a variable: no constant operand under &&
        const bool in = g < ng && in_row;
UNROLL_LOOP
        for (int e = 0; e < VEC; e += 4)
          qb[g][(j * VEC + e) / 4] =
              in ? load4_bits(q, ((size_t)req * num_qo_heads + h0 + g) * HEAD_DIM + c * VEC + e, q_dt) : (uint4)(0u);
      }
UNROLL_LOOP
    for (int g = 0; g < GMAX; ++g)
UNROLL_LOOP
      for (int k = 0; k < EL / 4; ++k) {
        const float4 x = bits4_to_float4(qb[g][k], q_dt) * (qs_h * RAW_HALF);
        qr[g][4 * k] = x.x, qr[g][4 * k + 1] = x.y, qr[g][4 * k + 2] = x.z, qr[g][4 * k + 3] = x.w;
      }
  }
#else
UNROLL_LOOP
  for (int g = 0; g < GMAX; ++g) {
UNROLL_LOOP
    for (int j = 0; j < NCH; ++j) {
      const int c = tl + j * TPT;
UNROLL_LOOP
      for (int e = 0; e < VEC; ++e) {
        float x = 0.0f;
        const bool in_row = FULL_CHUNKS || c < NCHUNK;
        if (g < ng && in_row)
          x = load_elem(q, ((size_t)req * num_qo_heads + h0 + g) * HEAD_DIM + c * VEC + e, q_dt) * qs_h * RAW_HALF;
        qr[g][j * VEC + e] = x;
      }
    }
  }
#endif

#if KV_I8 || KV_I4
UNROLL_LOOP
  for (int g = 0; g < GMAX; ++g)
UNROLL_LOOP
    for (int e = 0; e < EL; ++e) qr[g][e] *= 1.0f / ELEM_SCALE(e % EPW);
#endif

  float acc[GMAX][EL];
  float mrun[GMAX], lrun[GMAX];
UNROLL_LOOP
  for (int g = 0; g < GMAX; ++g) {
    mrun[g] = CLATTN_NEG_INF;
    lrun[g] = 0.0f;
UNROLL_LOOP
    for (int e = 0; e < EL; ++e) acc[g][e] = 0.0f;
  }

  const int ntiles = (end - begin + TILE - 1) / TILE;
  // Page ids of the lane's tokens in the current tile; the next tile's are loaded one tile
  // ahead so the K/V loads never wait on them. Tokens past the end re-read the first key's
  // row and are masked; ids outside the pool are clamped into it (bad records it).
  int pid[UNROLL];
  bool bad = false;
UNROLL_LOOP
  for (int u = 0; u < UNROLL; ++u) {
    const int tok = begin + u * NSLOT + slot;
    const int ls = tok_off + (tok < end ? tok : begin);
    pid[u] = ntiles > 0 ? page_ids[page_base + (ls >> log2_page)] : 0;
  }
#if PREFETCH
  // Tile 0's rows into the "next" registers; pid then holds tile 1's page ids.
  uint kw_n[UNROLL][NCH * LOAD_WORDS], vw_n[UNROLL][NCH * LOAD_WORDS];
  bool valid_n[UNROLL];
  if (ntiles > 0)
    issue_tile(begin, begin, end, tok_off, page_base, pmask, log2_page, num_pages, stride_page, stride_token, head_off,
               slot, tl, page_ids, k_cache, v_cache, pid, valid_n, &bad, kw_n, vw_n);
#endif
  for (int it = 0; it < ntiles; ++it) {
    const int tbase = begin + it * TILE;
    bool valid[UNROLL];
    uint kw[UNROLL][NCH * LOAD_WORDS];
#if PREFETCH
    uint vw[UNROLL][NCH * LOAD_WORDS];
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      valid[u] = valid_n[u];
UNROLL_LOOP
      for (int w = 0; w < NCH * LOAD_WORDS; ++w) kw[u][w] = kw_n[u][w], vw[u][w] = vw_n[u][w];
    }
    if (it + 1 < ntiles)  // tile it+1 (pid holds its page ids); pid becomes tile it+2's
      issue_tile(tbase + TILE, begin, end, tok_off, page_base, pmask, log2_page, num_pages, stride_page, stride_token,
                 head_off, slot, tl, page_ids, k_cache, v_cache, pid, valid_n, &bad, kw_n, vw_n);
#else
    size_t roff[UNROLL];
    int pid_next[UNROLL];
#if KV_I8
    float ksc[UNROLL], vsc[UNROLL];  // the tokens' row scales
#endif
#if KV_I4
    // Per token and lane load: its group's scale and 2^23 + zero point (K, V).
    float ksc[UNROLL][NCH], kz[UNROLL][NCH], vsc[UNROLL][NCH], vz[UNROLL][NCH];
#endif
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      const int tok = tbase + u * NSLOT + slot;
      valid[u] = tok < end;
      const int ls = tok_off + (valid[u] ? tok : begin);
      valid[u] = valid[u] && KEEP_KEY(ls);
      bad |= (uint)pid[u] >= (uint)num_pages;
      roff[u] = (size_t)KV_BYTES_OF((long)POOL_PAGE(pid[u]) * stride_page + (long)(ls & pmask) * stride_token + head_off);
#if KV_I8
      {
        const size_t so = (size_t)((long)POOL_PAGE(pid[u]) * sc_page + (long)(ls & pmask) * sc_token + (long)kvh * sc_head);
        ksc[u] = kv_row_scale(k_scales, so, sc_f16);
        vsc[u] = kv_row_scale(v_scales, so, sc_f16);
      }
#endif
#if KV_I4
      {
        const size_t so = (size_t)((long)POOL_PAGE(pid[u]) * sc_page + (long)(ls & pmask) * sc_token + (long)kvh * sc_head);
UNROLL_LOOP
        for (int j = 0; j < NCH; ++j) {
          const int c = tl + j * TPT;
          const bool in_row = FULL_CHUNKS || c < NCHUNK;
          const size_t at = so + 2 * (size_t)(c * VEC / QGROUP);
          ksc[u][j] = in_row ? kv_row_scale(k_scales, at, sc_f16) : 0.0f;
          kz[u][j] = in_row ? kv_row_scale(k_scales, at + 1, sc_f16) : 0.0f;
          vsc[u][j] = in_row ? kv_row_scale(v_scales, at, sc_f16) : 0.0f;
          vz[u][j] = in_row ? kv_row_scale(v_scales, at + 1, sc_f16) : 0.0f;
        }
      }
#endif
      const int tok_n = tok + TILE;
      const int ls_n = tok_off + (tok_n < end ? tok_n : begin);
      pid_next[u] = page_ids[page_base + (ls_n >> log2_page)];
    }
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) load_row(k_cache, roff[u], tl, kw[u]);
    // V with K: more bytes in flight while the scores are computed.
    uint vw[UNROLL][NCH * LOAD_WORDS];
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) load_row(v_cache, roff[u], tl, vw[u]);
#endif

    // Partial dot products of this lane's elements, then the slot sum.
    float s[NSCORE];
#if KV_I4
    // Per load: sum q * (u - zero), exact u - zero shared by the heads, times the K scale.
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      float d[GMAX];
UNROLL_LOOP
      for (int g = 0; g < GMAX; ++g) d[g] = 0.0f;
UNROLL_LOOP
      for (int j = 0; j < NCH; ++j) {
        float dj[GMAX], zb[4];  // zb: 2^23 + zero x ELEM_SCALE of the word's positions
UNROLL_LOOP
        for (int g = 0; g < GMAX; ++g) dj[g] = 0.0f;
UNROLL_LOOP
        for (int p = 0; p < 4; ++p) zb[p] = fma(kz[u][j], ELEM_SCALE(p), 0x1p23f);
UNROLL_LOOP
        for (int e = 0; e < VEC; ++e) {
          const float k = ROW_ELEM(kw[u], j * VEC + e) - zb[e & 3];
UNROLL_LOOP
          for (int g = 0; g < GMAX; ++g) dj[g] = fma(qr[g][j * VEC + e], k, dj[g]);
        }
UNROLL_LOOP
        for (int g = 0; g < GMAX; ++g) d[g] = fma(ksc[u][j], dj[g], d[g]);
      }
UNROLL_LOOP
      for (int g = 0; g < GMAX; ++g) s[u * GMAX + g] = d[g];
    }
#else
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
UNROLL_LOOP
      for (int g = 0; g < GMAX; ++g) {
        float d = 0.0f;
UNROLL_LOOP
        for (int e = 0; e < EL; ++e) d = fma(qr[g][e], ROW_ELEM(kw[u], e), d);
        s[u * GMAX + g] = d;
      }
    }
#endif
    slot_allreduce(s, lmem, pos);

    // Soft cap and masking, then one online-softmax update per head for the whole tile.
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
UNROLL_LOOP
      for (int g = 0; g < GMAX; ++g) {
#if KV_I8
        float x = s[u * GMAX + g] * ksc[u];
#elif KV_I4
        float x = s[u * GMAX + g];  // the K scales are in (per load)
#else
        float x = s[u * GMAX + g] * RAW_HALF;
#endif
        if (cap_log2 > 0.0f) x = cap_log2 * tanh(x * inv_cap);
        s[u * GMAX + g] = valid[u] ? x : CLATTN_NEG_INF;
      }
    }
UNROLL_LOOP
    for (int g = 0; g < GMAX; ++g) {
      float mt = s[g];
UNROLL_LOOP
      for (int u = 1; u < UNROLL; ++u) mt = fmax(mt, s[u * GMAX + g]);
      // Lazy rescaling: the reference max moves (and acc, l are rescaled) only when the
      // tile's max exceeds it by more than RESCALE_SLACK (log2 units), so weights stay below
      // 2^RESCALE_SLACK and most tiles skip the multiply over acc. mrun = -inf: nothing
      // accumulated yet (acc, l are 0); a finite mt always moves it.
      float mnew = mrun[g];
      float lsum = lrun[g];
      if (mt > mrun[g] + RESCALE_SLACK) {
        mnew = mt;
        const float alpha = mrun[g] == CLATTN_NEG_INF ? 0.0f : exp2(mrun[g] - mnew);
        lsum *= alpha;
UNROLL_LOOP
        for (int e = 0; e < EL; ++e) acc[g][e] *= alpha;
      }
UNROLL_LOOP
      for (int u = 0; u < UNROLL; ++u) {
        const float x = s[u * GMAX + g];
        const float p = x == CLATTN_NEG_INF ? 0.0f : exp2(x - mnew);
#if KV_I8
        s[u * GMAX + g] = p * vsc[u];  // the weight carries the V row's scale
#elif KV_I4
        s[u * GMAX + g] = p;  // the V scales join per load below
#else
        s[u * GMAX + g] = p * RAW_FULL;  // V rows are raw fp8 too (RAW_FULL = 1 otherwise)
#endif
        lsum += p;
      }
      lrun[g] = lsum;
      mrun[g] = mnew;
    }

#if !PREFETCH
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) pid[u] = pid_next[u];
#endif
#if KV_I4
    // Per load: the weight times the group's V scale, on the exact u - zero.
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      if (valid[u]) {
UNROLL_LOOP
        for (int j = 0; j < NCH; ++j) {
          float w[GMAX], zb[4];
UNROLL_LOOP
          for (int g = 0; g < GMAX; ++g) w[g] = s[u * GMAX + g] * vsc[u][j];
UNROLL_LOOP
          for (int p = 0; p < 4; ++p) zb[p] = fma(vz[u][j], ELEM_SCALE(p), 0x1p23f);
UNROLL_LOOP
          for (int e = 0; e < VEC; ++e) {
            const float v = ROW_ELEM(vw[u], j * VEC + e) - zb[e & 3];
UNROLL_LOOP
            for (int g = 0; g < GMAX; ++g) acc[g][j * VEC + e] = fma(w[g], v, acc[g][j * VEC + e]);
          }
        }
      }
    }
#else
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      if (valid[u]) {
UNROLL_LOOP
        for (int e = 0; e < EL; ++e) {
          const float v = ROW_ELEM(vw[u], e);
UNROLL_LOOP
          for (int g = 0; g < GMAX; ++g) acc[g][e] = fma(s[u * GMAX + g], v, acc[g][e]);
        }
      }
    }
#endif
  }

  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);

  // ---- Merge the NSLOT slot states (in slot order) and write the result.
  __local float* sm_o = lmem;                       // [NSLOT][HEAD_DIM]
  __local float* sm_m = lmem + NSLOT * HEAD_DIM;    // [NSLOT][GMAX]
  __local float* sm_l = sm_m + NSLOT * GMAX;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (tl == 0) {
UNROLL_LOOP
    for (int g = 0; g < GMAX; ++g) {
      sm_m[slot * GMAX + g] = mrun[g];
      sm_l[slot * GMAX + g] = lrun[g];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
UNROLL_LOOP
  for (int g = 0; g < GMAX; ++g) {
    float M = CLATTN_NEG_INF;
    for (int sl = 0; sl < NSLOT; ++sl) M = fmax(M, sm_m[sl * GMAX + g]);
    float L = 0.0f;
    for (int sl = 0; sl < NSLOT; ++sl) {
      const float ms = sm_m[sl * GMAX + g];
      if (ms != CLATTN_NEG_INF) L += sm_l[sl * GMAX + g] * exp2(ms - M);
    }
    const float f = mrun[g] == CLATTN_NEG_INF ? 0.0f : exp2(mrun[g] - M);
UNROLL_LOOP
    for (int j = 0; j < NCH; ++j) {
      const int c = tl + j * TPT;
      if (FULL_CHUNKS || c < NCHUNK) {
UNROLL_LOOP
        for (int e = 0; e < VEC; ++e)
          sm_o[slot * HEAD_DIM + c * VEC + e] = acc[g][j * VEC + e] * (f * (1.0f / ELEM_SCALE((j * VEC + e) % EPW)));
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (g < ng) {
      const int h = h0 + g;
      // out = sum * oscale; lse_out in natural log.
      const float2 fin = final_scale_lse(M, L, part, has_sinks, sinks, h, vs_h);
      const float oscale = fin.x, lse_out = fin.y;
      for (int d = lid; d < HEAD_DIM; d += WGSIZE) {
        float sum = 0.0f;
        for (int sl = 0; sl < NSLOT; ++sl) sum += sm_o[sl * HEAD_DIM + d];
        if (part < 0) store_elem(o, ((size_t)req * num_qo_heads + h) * HEAD_DIM + d, o_dt, sum * oscale);
        else ws[((size_t)part * num_qo_heads + h) * HEAD_DIM + d] = sum * oscale;
      }
      if (lid == 0) {
        if (part < 0) {
          if (has_lse) lse[(size_t)req * num_qo_heads + h] = lse_out;
        } else {
          ws[lse_off + (size_t)part * num_qo_heads + h] = lse_out;
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#if FUSE_MERGE
  if (part >= 0) fused_merge_tail(tab, merge_off, wk[6], counters, counter_off, ws, lse_off, o, o_dt, lse, has_lse,
                                  sinks, has_sinks, num_qo_heads, HEAD_DIM, h0, ng, lid, WGSIZE, &is_last);
#endif
}
