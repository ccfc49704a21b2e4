// Device timing through OpenCL profiling events (queues created by Context::create have
// profiling on; an adopted queue without it falls back to host wall time in callers).
#pragma once
#include "clattn/context.hpp"

namespace clattn::rt {

// Milliseconds between START and END of a finished event.
double event_ms(cl_event ev);
// Milliseconds from the START of `first` to the END of `last`.
double event_span_ms(cl_event first, cl_event last);

}  // namespace clattn::rt
