// Value types shared by every clattn op: status codes, the exception, dtypes, layouts.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "clattn/export.h"

namespace clattn {

// Numbers match the C ABI's clattn_status (clattn.h).
enum class Status : int {
  Success = 0,
  InvalidArgument = 1,   // shapes, metadata, options the caller got wrong
  Unsupported = 2,       // a valid request this device/build cannot run
  DeviceNotFound = 3,    // selector matched nothing
  BuildFailed = 4,       // OpenCL program failed to compile (message holds the log)
  OpenCLError = 5,       // an OpenCL call failed (message names the call and error)
  OutOfMemory = 6,
  Internal = 7,
};

CLATTN_API const char* status_name(Status s) noexcept;

class CLATTN_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message, int cl_error = 0)
      : std::runtime_error(message), status_(status), cl_error_(cl_error) {}
  Status status() const noexcept { return status_; }
  int cl_error() const noexcept { return cl_error_; }  // 0 when not an OpenCL failure

 private:
  Status status_;
  int cl_error_;
};

// I8: the int8 KV cache format (PagedKV, with a scale per (token, KV head)); I4: the int4 one
// (two nibbles a byte, a scale and zero point per group of head-dim elements). docs/kv_formats.md.
enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, FP8_E4M3 = 3, FP8_E5M2 = 4, I32 = 5, I64 = 6, I8 = 7, I4 = 8 };
CLATTN_API const char* dtype_name(DType t) noexcept;
// Bytes per element; int4 reports 1, the byte a pair of its elements shares (an upper bound,
// so a size computed from it never falls short). int4 byte sizes: PagedKV::required_bytes.
CLATTN_API std::size_t dtype_size(DType t) noexcept;

// Paged KV layout: NHD [pages, P, Hkv, D] (default) or HND [pages, Hkv, P, D].
enum class KVLayout : int { NHD = 0, HND = 1 };

CLATTN_API const char* version() noexcept;

}  // namespace clattn
