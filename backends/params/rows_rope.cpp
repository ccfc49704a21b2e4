// RoPE parameters (ops "rope": apply_rope and rope_append_kv, cl_kernels/rope.cl): generic and
// vendor rows. Each says where its numbers come from.
//
//   ROPE_WG    work-items per group (dimension 0 = the rotated pairs of a row, D/2 of them)
//   ROPE_ROWS  head rows per work-item: its pair's cos/sin (one sincos, or a cache read) serve
//              that many rows; the rest of the rows go to more groups in dimension 1
//   ROPE_TOKENS tokens per work-item (per work-group in the int8 / int4 kernels)
//   ROPE_KV_HEADS  KV heads per work-group of the int8 / int4 kernels (with an even share of
//              the q heads): a pair's cos/sin serves all of their rows; local memory holds
//              ROPE_WG floats per k and v row (two for int4, and its rotated k rows)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_rope() {
  static const std::vector<Row> rows = {
      // 64 work-items = D/2 of a D=128 row: one AMD wavefront or two NVIDIA warps; four rows
      // per work-item amortise the sincos and still give Hq/4 + 2Hkv/4 groups per token. Two
      // KV heads per quantising group: Hkv/2 groups per token (4 at Hkv = 8, with 8 q rows each).
      {"rope", Level::Generic, "", "*", {{"ROPE_WG", 64}, {"ROPE_ROWS", 4}, {"ROPE_TOKENS", 1}, {"ROPE_KV_HEADS", 2}},
       "portable default (by design; not tuned)"},
      // A CPU work-item is a loop: every row of 16 tokens in one item (a PoCL work-group has a
      // fixed cost of microseconds, one per token would dominate); the quantising kernels take
      // 8 KV heads a group, so a pair's sincos serves every row of a token at Hkv <= 8.
      {"rope", Level::Vendor, "cpu", "*", {{"ROPE_WG", 64}, {"ROPE_ROWS", 64}, {"ROPE_TOKENS", 16}, {"ROPE_KV_HEADS", 8}},
       "vendor docs: PoCL pthread device (one work-group per core thread; sized, not tuned)"},
  };
  return rows;
}
}  // namespace clattn::params
