// Streaming-read bandwidth probe: the limit memory-bound ops are measured against
// (same shape as the device notes' clbw probe: grid-stride float4 sum).
__kernel void stream_read(__global const float4* a, __global float* out, uint n4) {
  float4 acc = (float4)(0.f);
  for (uint i = get_global_id(0); i < n4; i += get_global_size(0)) acc += a[i];
  float s = acc.x + acc.y + acc.z + acc.w;
  if (s == 12345.678f) out[0] = s;  // never true: keeps the loads alive
}
