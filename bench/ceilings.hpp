// The compute ceilings compute-bound cases divide by, measured once per process on first use:
// the FP32 FMA-loop peak (clattn::measure_fma_peak) and CLBlast SGEMM (clattn::measure_sgemm)
// as "what portable OpenCL FP32 reaches on this device".
#pragma once
#include <string>

#include "bench/bench.hpp"

namespace clattn::bench {

struct Ceilings {
  ComputeCeiling fma, sgemm;
  int sgemm_n = 0;
};

// SGEMM size; 0 = 4096 on GPUs and other accelerators, 1024 on CPU devices (PoCL). Set from
// clattn-bench's --sgemm-n before the first ceilings() call.
int& sgemm_size();

// Measures both on first use (printing "# limit:" lines with their methods); later calls
// return the same numbers.
const Ceilings& ceilings(Harness& h);

// One result row's place against both ceilings, printed under the row (and appended to
// --json as a row with "kind":"ceilings"): "ceilings  12.3 TFLOP/s: 18.4% of FP32 FMA peak
// 66.9 TFLOP/s, 25.1% of CLBlast SGEMM 49.0 TFLOP/s".
void report_ceilings(Harness& h, const std::string& op, const std::string& shape, double tflops);

}  // namespace clattn::bench
