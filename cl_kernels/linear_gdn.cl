// Gated DeltaNet: decode step and chunked varlen prefill over a pooled state.
// The kernels live in linear_common.clh (shared with simple GLA, linear_gla.cl).
#define LIN_GDN 1
#define LIN_DECODE_NAME gdn_decode
#define LIN_PREFILL_NAME gdn_prefill
#include "linear_common.clh"
