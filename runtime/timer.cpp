#include "runtime/timer.hpp"

#include "runtime/error.hpp"

namespace clattn::rt {

double event_span_ms(cl_event first, cl_event last) {
  check_cl(clWaitForEvents(1, &last), "clWaitForEvents");
  cl_ulong s = 0, e = 0;
  check_cl(clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof s, &s, nullptr), "clGetEventProfilingInfo");
  check_cl(clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof e, &e, nullptr), "clGetEventProfilingInfo");
  return double(e - s) * 1e-6;
}

double event_ms(cl_event ev) { return event_span_ms(ev, ev); }

}  // namespace clattn::rt
