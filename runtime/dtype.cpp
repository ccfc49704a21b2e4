// Names and sizes of the dtypes (clattn/types.hpp).
#include "clattn/types.hpp"

namespace clattn {

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::FP8_E4M3: return "fp8_e4m3";
    case DType::FP8_E5M2: return "fp8_e5m2";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::I8: return "int8";
    case DType::I4: return "int4";
  }
  return "?";
}
std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::FP8_E4M3: case DType::FP8_E5M2: case DType::I8: case DType::I4: return 1;
    case DType::I64: return 8;
  }
  return 0;
}

}  // namespace clattn
