// Runtime self-check: converts every value through each dtype's store and load path,
// so a device whose compiler mangles the bit tricks in common.clh is caught at start.
#include "common.clh"

__kernel void dtype_roundtrip(__global const float* in, __global float* out, __global uchar* scratch, int n,
                              int dtype) {
  int i = get_global_id(0);
  if (i >= n) return;
  store_elem(scratch, i, dtype, in[i]);
  out[i] = load_elem(scratch, i, dtype);
}
