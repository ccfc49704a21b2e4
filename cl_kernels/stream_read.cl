// Streaming-read bandwidth probe: the limit memory-bound ops are measured against.
// GPUs: grid-stride float4 sum (coalesced across work-items, as the device notes' clbw
// probe). CPUs (CONTIGUOUS=1): each work-item sums its own contiguous block, which is the
// access pattern a CPU's prefetchers stream at full speed.
#ifndef CONTIGUOUS
#define CONTIGUOUS 0
#endif

__kernel void stream_read(__global const float4* a, __global float* out, uint n4) {
  float4 acc = (float4)(0.f);
#if CONTIGUOUS
  uint per = (n4 + get_global_size(0) - 1) / get_global_size(0);
  uint begin = get_global_id(0) * per;
  uint end = min(begin + per, n4);
  for (uint i = begin; i < end; ++i) acc += a[i];
#else
  for (uint i = get_global_id(0); i < n4; i += get_global_size(0)) acc += a[i];
#endif
  float s = acc.x + acc.y + acc.z + acc.w;
  if (s == 12345.678f) out[0] = s;  // never true: keeps the loads alive
}
