// FP32 FMA-loop peak: the compute ceiling compute-bound benchmarks divide by. Every
// work-item runs CHAINS independent fma() chains of VEC lanes (float, float2, float4, float8
// or float16), UNROLL steps per loop iteration, `iters` iterations; no memory traffic but one
// store per work-item at the end. FLOPs per work-item = 2 * VEC * CHAINS * UNROLL * iters.
// Each chain converges (x -> x * m + a with |m| < 1), so the values stay finite and normal
// whatever the iteration count; m and a are arguments, so the compiler cannot fold the loop.
#ifndef VEC
#define VEC 4
#endif
#ifndef CHAINS
#define CHAINS 8
#endif
#ifndef UNROLL
#define UNROLL 8
#endif

#if VEC == 1
typedef float vec_t;
#elif VEC == 2
typedef float2 vec_t;
#elif VEC == 4
typedef float4 vec_t;
#elif VEC == 8
typedef float8 vec_t;
#elif VEC == 16
typedef float16 vec_t;
#else
#error "VEC must be 1, 2, 4, 8 or 16"
#endif

__kernel void fma_peak(__global float* out, float m, float a, int iters) {
  const float seed = (float)(get_global_id(0) & 255) * (1.0f / 256.0f);
  vec_t x[CHAINS];
#pragma unroll
  for (int c = 0; c < CHAINS; ++c) x[c] = (vec_t)(seed + (float)c);
  const vec_t mv = (vec_t)(m), av = (vec_t)(a);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int c = 0; c < CHAINS; ++c) x[c] = fma(x[c], mv, av);
    }
  }
  vec_t s = x[0];
#pragma unroll
  for (int c = 1; c < CHAINS; ++c) s += x[c];
  float r = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) r += ((float*)&s)[k];
  out[get_global_id(0)] = r;
}
