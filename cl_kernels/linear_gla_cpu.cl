// Simple gated linear attention for CPU devices (variant "cpu"): decode step and chunked
// varlen prefill over a pooled state. Kernels: linear_cpu.clh.
#define LIN_GDN 0
#define LIN_DECODE_CPU_NAME gla_decode_cpu
#define LIN_PREFILL_CPU_NAME gla_prefill_cpu
#include "linear_cpu.clh"
