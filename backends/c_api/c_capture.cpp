// C ABI: op-level capture and replay (clattn/capture.hpp).
#include <memory>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/capture.hpp"

struct clattn_capture_s {
  std::unique_ptr<clattn::Capture> cap;
};

using clattn::capi::guard;
using clattn::capi::need;

extern "C" {

clattn_status clattn_capture_create(clattn_context ctx, cl_command_queue queue, int command_buffer, clattn_capture* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    auto c = std::make_unique<clattn_capture_s>();
    c->cap = std::make_unique<clattn::Capture>(need(ctx, "ctx")->ctx, queue, command_buffer != 0);
    *out = c.release();
  });
}

clattn_status clattn_capture_begin(clattn_capture c) { return guard([&] { need(c, "capture")->cap->begin(); }); }
clattn_status clattn_capture_end(clattn_capture c) { return guard([&] { need(c, "capture")->cap->end(); }); }

clattn_status clattn_capture_replay(clattn_capture c, const clattn_enqueue* e) {
  return guard([&] { need(c, "capture")->cap->replay(clattn::capi::to_cpp(e)); });
}

clattn_status clattn_capture_info(clattn_capture c, int* launches, int* command_buffer) {
  return guard([&] {
    need(c, "capture");
    *need(launches, "launches") = c->cap->launches();
    *need(command_buffer, "command_buffer") = c->cap->uses_command_buffer() ? 1 : 0;
  });
}

void clattn_capture_release(clattn_capture c) { delete c; }

clattn_status clattn_capture_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                    const size_t* global_size, const size_t* local_size) {
  return guard([&] { clattn::capture_kernel(queue, kernel, work_dim, global_size, local_size); });
}

}  // extern "C"
