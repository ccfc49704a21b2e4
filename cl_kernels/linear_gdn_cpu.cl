// Gated DeltaNet for CPU devices (variant "cpu"): decode step and chunked varlen prefill over
// a pooled state. The kernels live in linear_cpu.clh (shared with simple GLA,
// linear_gla_cpu.cl).
#define LIN_GDN 1
#define LIN_DECODE_CPU_NAME gdn_decode_cpu
#define LIN_PREFILL_CPU_NAME gdn_prefill_cpu
#include "linear_cpu.clh"
