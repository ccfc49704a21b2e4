// The C ABI's plumbing: handle types, the thread-local last error, and the guard that turns
// every exception into a status (CLBlast's DispatchExceptionForC).
#pragma once
#include <string>

#include "clattn/clattn.h"
#include "clattn/context.hpp"

struct clattn_context_s {
  clattn::Context ctx;
};

namespace clattn::capi {

void set_last_error(const std::string& msg);

template <class F>
clattn_status guard(F&& f) noexcept {
  try {
    f();
    set_last_error("");
    return CLATTN_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<clattn_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return CLATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return CLATTN_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return CLATTN_INTERNAL;
  }
}

// Throws InvalidArgument naming `what` when p is null.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw Error(Status::InvalidArgument, std::string(what) + " is NULL");
  return p;
}

}  // namespace clattn::capi
