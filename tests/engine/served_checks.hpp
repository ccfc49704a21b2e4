// The checks every served-model test makes on a serve-sim report: no failures, no mismatch
// against the reference, some checks made, more than min_decode_steps decode steps served.
#pragma once
#include <gtest/gtest.h>

#include "sim.hpp"

namespace clattn::test {

inline void expect_served_clean(const sim::Report& r, int min_decode_steps) {
  for (const auto& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_GT(r.checks, 0);
  EXPECT_GT(r.decode_steps, min_decode_steps);
}

}  // namespace clattn::test
