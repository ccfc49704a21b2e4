// Shared pieces of the clattn Python binding: the device tensor type, dtype mapping and
// argument checks. The binding is split by topic (tensor.cpp, ops.cpp, mla.cpp,
// linear.cpp, metadata.cpp, sparse.cpp, dsa.cpp, rope.cpp); module.cpp ties them together.
// Decisions: docs/python.md.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clattn/clattn.hpp"

namespace clattn_py {

namespace py = pybind11;

// dtypes a Python tensor may hold: the library's plus raw bytes (masks, workspaces).
// I8: the int8 KV cache format (docs/kv_formats.md).
enum class PDType : int { F32, F16, BF16, FP8_E4M3, FP8_E5M2, I32, I64, U8, I8 };

PDType parse_dtype(const std::string& s, const char* arg);  // "float16", "f16", "bf16", ...
const char* dtype_str(PDType d);
std::size_t dtype_bytes(PDType d);
py::dtype numpy_dtype(PDType d);        // bf16 -> uint16, fp8 -> uint8 (raw bits), i8 -> int8
PDType from_numpy(const py::dtype& d, const char* arg);  // float32/float16/int32/int64/uint8/int8
clattn::DType to_lib(PDType d, const char* arg);         // rejects U8
clattn::KVLayout parse_layout(const std::string& s);

[[noreturn]] void invalid(const std::string& msg);  // throws clattn::Error(InvalidArgument)

// A device tensor: a retained cl_mem on a clattn context, its shape and dtype. Created by
// Context.to_device/empty/zeros, by wrapping a pyopencl Buffer/Array or a cl_mem int
// (zero-copy: `owner` keeps the foreign object alive), or by DLPack import.
struct Tensor {
  clattn::Context ctx;
  cl_mem mem = nullptr;            // retained by this object, released in the destructor
  std::vector<int64_t> shape;
  PDType dtype = PDType::F32;
  py::object owner;                // foreign owner kept alive (pyopencl object, DLPack capsule)

  explicit Tensor(const clattn::Context& c) : ctx(c) {}
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

  int64_t numel() const;
  int64_t nbytes() const { return numel() * int64_t(dtype_bytes(dtype)); }
  std::size_t buffer_bytes() const;  // CL_MEM_SIZE
};
using TensorPtr = std::shared_ptr<Tensor>;

std::string shape_str(const std::vector<int64_t>& s);
std::string dtype_repr(const py::dtype& d);  // numpy dtype name

// Allocation helpers (blocking only where noted).
TensorPtr alloc_tensor(const clattn::Context& ctx, std::vector<int64_t> shape, PDType dt);
TensorPtr upload(const clattn::Context& ctx, const py::array& a, PDType dt);  // blocking write

// Tensor arguments reach the native functions as Python objects and are converted here:
// None -> null, a clattn.Tensor -> its shared pointer (held for the whole call), anything
// else -> clattn.Error naming the argument. No raw Tensor* parameters: what a binding
// library makes of a None pointer argument, and how long the object behind a raw pointer
// lives, is then not the binding's contract to rely on.
TensorPtr tensor_arg(const py::handle& h, const char* name);

// The cl_mem of an optional tensor argument after checking it lives on ctx (nullptr when
// t is null). `name` is used in the error message.
cl_mem mem_of(const clattn::Context& ctx, const Tensor* t, const char* name);
// Checks dtype and (when given, -1 = any) shape; returns the cl_mem.
cl_mem check_tensor(const clattn::Context& ctx, const Tensor* t, const char* name,
                    std::initializer_list<PDType> dtypes, const std::vector<int64_t>& shape = {});

inline cl_mem mem_of(const clattn::Context& ctx, const TensorPtr& t, const char* name) { return mem_of(ctx, t.get(), name); }
inline cl_mem check_tensor(const clattn::Context& ctx, const TensorPtr& t, const char* name,
                           std::initializer_list<PDType> dtypes, const std::vector<int64_t>& shape = {}) {
  return check_tensor(ctx, t.get(), name, dtypes, shape);
}

// Host int32 vector from any integer array-like (copied; values checked to fit int32).
std::vector<int32_t> to_i32(const py::handle& a, const char* name);

// A decode plan's metadata from the sparse wrappers' arguments: CSR (indptr, indices, last)
// or, when page_table is not None, a page table [B, max_pages] (block_tables) with seq_lens
// [B]; `f` plans from the one given, without the GIL.
template <class F>
auto plan_from(py::object indptr, py::object indices, py::object last, py::object page_table, py::object seq_lens,
               int max_pages, int page_size, F&& f) {
  if (!page_table.is_none()) {
    clattn::PageTable t;
    t.page_size = page_size;
    t.max_pages = max_pages;
    t.page_table = to_i32(page_table, "block_tables");
    t.seq_lens = to_i32(seq_lens, "seq_lens");
    py::gil_scoped_release nogil;
    return f(t);
  }
  clattn::PagedCsr csr;
  csr.page_size = page_size;
  csr.kv_indptr = to_i32(indptr, "kv_indptr");
  csr.kv_indices = to_i32(indices, "kv_indices");
  csr.kv_last_page_len = to_i32(last, "kv_last_page_len");
  py::gil_scoped_release nogil;
  return f(csr);
}

// The side buffers of a KV cache, checked: a quantised cache's scale caches (int8: one
// scale per (token, KV head); int4: a [scale, zero] pair per (token, KV head, group); f32 or
// f16; docs/kv_formats.md) and per-KV-head scales
// ([Hkv] f32). Null handles stay null; the library checks which the cache needs.
struct KVScales {
  cl_mem k_cache = nullptr, v_cache = nullptr, k_head = nullptr, v_head = nullptr;
  std::vector<TensorPtr> hold;  // k_cache, v_cache, k_head, v_head (null when absent)
};
KVScales kv_scales(const clattn::Context& ctx, py::handle k_scale_cache, py::handle v_scale_cache,
                   py::handle k_head_scales, py::handle v_head_scales);

// An int8 MLA latent cache's scale cache (a (ckv, kpe) scale pair per token, f32 or f16;
// docs/kv_formats.md "int8 MLA latent"), checked; nullptr when t is null (the library
// checks whether the cache needs one).
cl_mem latent_scale_cache(const clattn::Context& ctx, const TensorPtr& t);

// append_kv's arguments from the Python ones (shared by _append_kv and _rope_append_kv):
// shapes and dtypes checked, the host slot copy (when not None) validated against the cache.
// kv_dtype "i4": the caches are u8 tensors of nibble pairs ([..., head_dim / 2]) of an int4
// cache with quant_group; otherwise ("") the caches' tensor dtype is the cache dtype.
struct AppendKV {
  clattn::AppendKVArgs args;
  std::vector<TensorPtr> hold;  // the tensors behind args' buffers, alive for the call
};
AppendKV append_kv_args(const clattn::Context& ctx, py::handle k, py::handle v, py::handle slot_mapping,
                        py::handle k_cache, py::handle v_cache, const std::string& layout, float k_scale,
                        float v_scale, py::object slot_mapping_host, const KVScales& scales = {},
                        const std::string& kv_dtype = "", int quant_group = 0);

void init_tensor(py::module_& m);
void init_ops(py::module_& m);
void init_mla(py::module_& m);
void init_linear(py::module_& m);
void init_metadata(py::module_& m);
void init_lse(py::module_& m);
void init_sparse(py::module_& m);
void init_dsa(py::module_& m);
void init_rope(py::module_& m);
void init_capture(py::module_& m);

}  // namespace clattn_py
