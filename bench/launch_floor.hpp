// The driver's cost of one kernel launch on the context's queue (launch_floor.cpp).
#pragma once
#include "clattn/context.hpp"

namespace clattn::bench {
// Prints one "limits     launch floor ..." line: empty kernels of 2, 12 (buffers) and 43 arguments.
void print_launch_floor(const Context& ctx);
}  // namespace clattn::bench
