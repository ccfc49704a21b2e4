// C ABI: version, errors, contexts, profile, self-check.
#include <algorithm>
#include <cstring>

#include "backends/c_api/c_api_common.hpp"
#include "clattn/diagnostics.hpp"

namespace clattn::capi {
namespace {
thread_local std::string last_error;
}
void set_last_error(const std::string& msg) { last_error = msg; }
}  // namespace clattn::capi

using clattn::capi::guard;
using clattn::capi::need;

extern "C" {

const char* clattn_version(void) { return clattn::version(); }
const char* clattn_last_error(void) { return clattn::capi::last_error.c_str(); }
const char* clattn_status_name(clattn_status s) { return clattn::status_name(static_cast<clattn::Status>(s)); }

clattn_status clattn_context_create(const char* selector, clattn_context* out) {
  return clattn_context_create_with_variants(selector, nullptr, out);
}

clattn_status clattn_context_adopt(cl_context ctx, cl_device_id device, cl_command_queue queue, clattn_context* out) {
  return clattn_context_adopt_with_variants(ctx, device, queue, nullptr, out);
}

clattn_status clattn_context_create_with_variants(const char* selector, const char* variants, clattn_context* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    const clattn::ContextOptions opts{variants ? variants : "", ""};
    *out = new clattn_context_s{clattn::Context::create(selector ? selector : "", opts)};
  });
}

clattn_status clattn_context_adopt_with_variants(cl_context ctx, cl_device_id device, cl_command_queue queue,
                                                 const char* variants, clattn_context* out) {
  return guard([&] {
    need(out, "out");
    *out = nullptr;
    const clattn::ContextOptions opts{variants ? variants : "", ""};
    *out = new clattn_context_s{clattn::Context::adopt(ctx, device, queue, opts)};
  });
}

void clattn_context_release(clattn_context ctx) { delete ctx; }

clattn_status clattn_context_queue(clattn_context ctx, cl_command_queue* out) {
  return guard([&] { *need(out, "out") = need(ctx, "ctx")->ctx.cl_queue(); });
}

clattn_status clattn_device_profile_json(clattn_context ctx, char* buf, size_t capacity, size_t* needed) {
  return guard([&] {
    std::string s = clattn::profile_json(need(ctx, "ctx")->ctx.profile());
    if (needed) *needed = s.size() + 1;
    if (buf && capacity) {
      size_t n = std::min(capacity - 1, s.size());
      std::memcpy(buf, s.data(), n);
      buf[n] = '\0';
    }
  });
}

clattn_status clattn_self_check(clattn_context ctx) {
  return guard([&] { clattn::self_check(need(ctx, "ctx")->ctx); });
}

clattn_status clattn_context_device_faults(clattn_context ctx, uint32_t* out, int clear) {
  return guard([&] {
    need(out, "out");
    *out = need(ctx, "ctx")->ctx.device_faults(clear != 0);
  });
}

}  // extern "C"
