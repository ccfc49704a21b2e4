// Simple gated linear attention (scalar-per-head decay; "lightning" = constant decay):
// decode step and chunked varlen prefill over a pooled state. Kernels: linear_common.clh.
#define LIN_GDN 0
#define LIN_DECODE_NAME gla_decode
#define LIN_PREFILL_NAME gla_prefill
#include "linear_common.clh"
