// clattn double-precision CPU reference for rotary position embedding (include/clattn/rope.hpp),
// one row at a time. Written from the contract in rope.hpp, independently of any kernel.
#pragma once
#include <cstdint>

namespace clattn::ref {

// Rotates one head row x [D] in place at position `pos`: rotary dims R (even, <= D), pairs
// NeoX (i, i + R/2) or GPT-J (2i, 2i + 1) for i < R/2, (x, y) -> (x c - y s, y c + x s),
// dims R .. D-1 unchanged.
//   cos_sin == nullptr: angle_i = pos / scale * theta^(-2i / R), c = cos, s = sin (double);
//   else c = cos_sin[i], s = cos_sin[R/2 + i] (the cache's row for pos, already selected).
void rope_row(double* x, int D, int R, bool gptj, int64_t pos, double theta, double scale, const double* cos_sin);

}  // namespace clattn::ref
