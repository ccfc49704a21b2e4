// Context, device tensors, zero-copy wrapping (pyopencl, cl_mem ints) and DLPack.
#include <algorithm>
#include <cstring>

#include "binding.hpp"

namespace clattn_py {

namespace {

// ---- DLPack (v0.8 ABI, the one __dlpack__ capsules carry) ------------------------------
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLOpenCL = 4;
enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLFloat8_e4m3fn = 10, kDLFloat8_e5m2 = 12 };

DLDataType to_dl(PDType d) {
  switch (d) {
    case PDType::F32: return {kDLFloat, 32, 1};
    case PDType::F16: return {kDLFloat, 16, 1};
    case PDType::BF16: return {kDLBfloat, 16, 1};
    case PDType::FP8_E4M3: return {kDLFloat8_e4m3fn, 8, 1};
    case PDType::FP8_E5M2: return {kDLFloat8_e5m2, 8, 1};
    case PDType::I32: return {kDLInt, 32, 1};
    case PDType::I64: return {kDLInt, 64, 1};
    case PDType::U8: return {kDLUInt, 8, 1};
    case PDType::I8: return {kDLInt, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

PDType from_dl(DLDataType t) {
  if (t.lanes != 1) invalid("from_dlpack: vector dtypes (lanes = " + std::to_string(t.lanes) + ") are not supported");
  if (t.code == kDLFloat && t.bits == 32) return PDType::F32;
  if (t.code == kDLFloat && t.bits == 16) return PDType::F16;
  if (t.code == kDLBfloat && t.bits == 16) return PDType::BF16;
  if (t.code == kDLFloat8_e4m3fn && t.bits == 8) return PDType::FP8_E4M3;
  if (t.code == kDLFloat8_e5m2 && t.bits == 8) return PDType::FP8_E5M2;
  if (t.code == kDLInt && t.bits == 32) return PDType::I32;
  if (t.code == kDLInt && t.bits == 64) return PDType::I64;
  if (t.code == kDLUInt && t.bits == 8) return PDType::U8;
  if (t.code == kDLInt && t.bits == 8) return PDType::I8;
  invalid("from_dlpack: unsupported DLPack dtype (code " + std::to_string(t.code) + ", bits " +
          std::to_string(t.bits) + ")");
}

struct ExportCtx {
  TensorPtr t;
  std::vector<int64_t> shape;
};

void export_deleter(DLManagedTensor* m) {
  if (!m) return;
  {
    py::gil_scoped_acquire gil;  // the tensor may hold a Python owner
    delete static_cast<ExportCtx*>(m->manager_ctx);
  }
  delete m;
}

void capsule_destructor(PyObject* cap) {
  // Called when an unconsumed "dltensor" capsule dies: the exporter frees it.
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

int device_index_of(const clattn::Context& ctx) {
  for (const auto& d : clattn::list_devices())
    if (d.device == ctx.cl_device()) return d.index;
  return 0;
}

py::dict profile_dict(const clattn::DeviceProfile& p) {
  py::dict d;
  d["vendor"] = p.vendor;
  d["vendor_forced"] = p.vendor_forced;
  d["device_name"] = p.device_name;
  d["device_vendor"] = p.device_vendor;
  d["driver_version"] = p.driver_version;
  d["device_version"] = p.device_version;
  d["platform_name"] = p.platform_name;
  d["platform_vendor"] = p.platform_vendor;
  d["platform_version"] = p.platform_version;
  d["opencl_c_version"] = p.opencl_c_version;
  d["architecture"] = p.architecture;
  d["is_gpu"] = p.is_gpu;
  d["is_cpu"] = p.is_cpu;
  d["compute_units"] = p.compute_units;
  d["max_work_group_size"] = p.max_work_group_size;
  d["local_mem_bytes"] = p.local_mem_bytes;
  d["global_mem_bytes"] = p.global_mem_bytes;
  d["max_alloc_bytes"] = p.max_alloc_bytes;
  d["fp16"] = p.fp16;
  d["fp64"] = p.fp64;
  d["subgroups"] = p.subgroups;
  d["subgroup_sizes"] = p.subgroup_sizes;
  d["intel_subgroups"] = p.intel_subgroups;
  d["intel_required_subgroup_size"] = p.intel_required_subgroup_size;
  d["integer_dot_product"] = p.integer_dot_product;
  d["portable_only"] = p.portable_only;
  d["nv_inline_ptx"] = p.nv_inline_ptx;
  d["nv_compute_capability"] = p.nv_compute_capability;
  d["amd_wavefront"] = p.amd_wavefront;
  d["warp_size"] = p.warp_size;
  d["extensions"] = p.extensions;
  return d;
}

std::vector<int64_t> shape_from(const py::handle& s) {
  std::vector<int64_t> out;
  if (py::isinstance<py::int_>(s)) {
    out.push_back(s.cast<int64_t>());
  } else {
    for (auto v : s) out.push_back(v.cast<int64_t>());
  }
  for (auto v : out)
    if (v < 0) invalid("shape " + shape_str(out) + " has a negative dimension");
  return out;
}

int64_t int_ptr(const py::handle& o, const char* what) {
  if (py::hasattr(o, "int_ptr")) return o.attr("int_ptr").cast<int64_t>();
  if (py::isinstance<py::int_>(o)) return o.cast<int64_t>();
  invalid(std::string(what) + ": expected a pyopencl object (with .int_ptr) or an int handle");
}

clattn::Context make_context(const py::object& device, const std::string& variants) {
  const clattn::ContextOptions opts{variants, ""};
  if (device.is_none()) return clattn::Context::create("", opts);
  if (py::isinstance<py::str>(device)) return clattn::Context::create(device.cast<std::string>(), opts);
  if (py::isinstance<py::int_>(device)) {
    int64_t i = device.cast<int64_t>();
    if (i < 0) invalid("Context: device index " + std::to_string(i) + " is negative");
    return clattn::Context::create(std::to_string(i), opts);
  }
  if (py::isinstance<py::tuple>(device) || py::isinstance<py::list>(device)) {
    auto seq = device.cast<py::sequence>();
    if (seq.size() != 2 && seq.size() != 3)
      invalid("Context: a tuple device must be (pyopencl.Context, pyopencl.CommandQueue) or (cl_context, cl_device_id, cl_command_queue) ints");
    if (seq.size() == 2) {
      py::object c = seq[0], q = seq[1];
      if (!py::hasattr(q, "device")) invalid("Context: second item must be a pyopencl.CommandQueue");
      auto cp = int_ptr(c, "Context(context)"), qp = int_ptr(q, "Context(queue)");
      auto dp = int_ptr(q.attr("device"), "Context(queue.device)");
      return clattn::Context::adopt(reinterpret_cast<cl_context>(cp), reinterpret_cast<cl_device_id>(dp),
                                    reinterpret_cast<cl_command_queue>(qp), opts);
    }
    auto cp = int_ptr(seq[0], "Context(context)"), dp = int_ptr(seq[1], "Context(device)");
    auto qp = int_ptr(seq[2], "Context(queue)");
    return clattn::Context::adopt(reinterpret_cast<cl_context>(cp), reinterpret_cast<cl_device_id>(dp),
                                  reinterpret_cast<cl_command_queue>(qp), opts);
  }
  invalid("Context: device must be None, a selector string, an index or (pyopencl.Context, pyopencl.CommandQueue)");
}

// Wraps a foreign cl_mem zero-copy after checking it belongs to ctx and is large enough.
TensorPtr wrap_mem(const clattn::Context& ctx, cl_mem mem, std::vector<int64_t> shape, PDType dt, py::object owner,
                   const char* what) {
  if (!mem) invalid(std::string(what) + ": null cl_mem");
  cl_context mc = nullptr;
  cl_int err = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof(mc), &mc, nullptr);
  if (err != CL_SUCCESS) invalid(std::string(what) + ": not a valid cl_mem (clGetMemObjectInfo failed, " + std::to_string(err) + ")");
  if (mc != ctx.cl_ctx()) invalid(std::string(what) + ": the buffer belongs to another OpenCL context than this clattn.Context");
  size_t size = 0;
  clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(size), &size, nullptr);
  auto t = std::make_shared<Tensor>(ctx);
  t->shape = std::move(shape);
  t->dtype = dt;
  if (size_t(t->nbytes()) > size)
    invalid(std::string(what) + ": shape " + shape_str(t->shape) + " " + dtype_str(dt) + " needs " +
            std::to_string(t->nbytes()) + " bytes, the buffer holds " + std::to_string(size));
  clRetainMemObject(mem);
  t->mem = mem;
  t->owner = std::move(owner);
  return t;
}

}  // namespace

// ---- dtype helpers ---------------------------------------------------------------------
PDType parse_dtype(const std::string& s0, const char* arg) {
  std::string s = s0;
  auto p = s.find("torch.");
  if (p == 0) s = s.substr(6);
  if (s == "f32" || s == "float32" || s == "float") return PDType::F32;
  if (s == "f16" || s == "float16" || s == "half") return PDType::F16;
  if (s == "bf16" || s == "bfloat16") return PDType::BF16;
  if (s == "fp8_e4m3" || s == "e4m3" || s == "float8_e4m3fn") return PDType::FP8_E4M3;
  if (s == "fp8_e5m2" || s == "e5m2" || s == "float8_e5m2") return PDType::FP8_E5M2;
  if (s == "i32" || s == "int32") return PDType::I32;
  if (s == "i64" || s == "int64") return PDType::I64;
  if (s == "u8" || s == "uint8") return PDType::U8;
  if (s == "i8" || s == "int8") return PDType::I8;
  invalid(std::string(arg) + ": unknown dtype '" + s0 +
          "' (f32 f16 bf16 fp8_e4m3 fp8_e5m2 i32 i64 u8 i8, or numpy/torch names)");
}

const char* dtype_str(PDType d) {
  switch (d) {
    case PDType::F32: return "f32";
    case PDType::F16: return "f16";
    case PDType::BF16: return "bf16";
    case PDType::FP8_E4M3: return "fp8_e4m3";
    case PDType::FP8_E5M2: return "fp8_e5m2";
    case PDType::I32: return "i32";
    case PDType::I64: return "i64";
    case PDType::U8: return "u8";
    case PDType::I8: return "i8";
  }
  return "?";
}

std::size_t dtype_bytes(PDType d) {
  switch (d) {
    case PDType::F32: case PDType::I32: return 4;
    case PDType::F16: case PDType::BF16: return 2;
    case PDType::I64: return 8;
    default: return 1;
  }
}

py::dtype numpy_dtype(PDType d) {
  switch (d) {
    case PDType::F32: return py::dtype("float32");
    case PDType::F16: return py::dtype("float16");
    case PDType::BF16: return py::dtype("uint16");
    case PDType::I32: return py::dtype("int32");
    case PDType::I64: return py::dtype("int64");
    case PDType::I8: return py::dtype("int8");
    default: return py::dtype("uint8");
  }
}

PDType from_numpy(const py::dtype& d, const char* arg) {
  char k = d.kind();
  auto sz = d.itemsize();
  if (k == 'f' && sz == 4) return PDType::F32;
  if (k == 'f' && sz == 2) return PDType::F16;
  if (k == 'i' && sz == 4) return PDType::I32;
  if (k == 'i' && sz == 8) return PDType::I64;
  if (k == 'u' && sz == 1) return PDType::U8;
  if (k == 'i' && sz == 1) return PDType::I8;
  if (k == 'u' && sz == 2)
    invalid(std::string(arg) + ": a uint16 array needs an explicit dtype='bf16' (numpy has no bfloat16)");
  invalid(std::string(arg) + ": numpy dtype " + dtype_repr(d) +
          " is not supported (float32 float16 int32 int64 uint8; bf16 as uint16 + dtype='bf16', fp8 as uint8 + dtype)");
}

clattn::DType to_lib(PDType d, const char* arg) {
  switch (d) {
    case PDType::F32: return clattn::DType::F32;
    case PDType::F16: return clattn::DType::F16;
    case PDType::BF16: return clattn::DType::BF16;
    case PDType::FP8_E4M3: return clattn::DType::FP8_E4M3;
    case PDType::FP8_E5M2: return clattn::DType::FP8_E5M2;
    case PDType::I32: return clattn::DType::I32;
    case PDType::I64: return clattn::DType::I64;
    case PDType::I8: return clattn::DType::I8;
    default: invalid(std::string(arg) + ": u8 is not an attention dtype");
  }
}

clattn::KVLayout parse_layout(const std::string& s) {
  if (s == "NHD") return clattn::KVLayout::NHD;
  if (s == "HND") return clattn::KVLayout::HND;
  invalid("kv_layout must be 'NHD' or 'HND', got '" + s + "'");
}

void invalid(const std::string& msg) { throw clattn::Error(clattn::Status::InvalidArgument, msg); }

std::string dtype_repr(const py::dtype& d) { return py::cast<std::string>(d.attr("name")); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// ---- Tensor ------------------------------------------------------------------------------
Tensor::~Tensor() {
  if (mem) clReleaseMemObject(mem);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto v : shape) n *= v;
  return n;
}

std::size_t Tensor::buffer_bytes() const {
  size_t size = 0;
  clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(size), &size, nullptr);
  return size;
}

TensorPtr alloc_tensor(const clattn::Context& ctx, std::vector<int64_t> shape, PDType dt) {
  auto t = std::make_shared<Tensor>(ctx);
  t->shape = std::move(shape);
  t->dtype = dt;
  for (auto v : t->shape)
    if (v < 0) invalid("shape " + shape_str(t->shape) + " has a negative dimension");
  size_t bytes = std::max<size_t>(size_t(t->nbytes()), 16);  // OpenCL rejects 0-byte buffers
  cl_int err = CL_SUCCESS;
  t->mem = clCreateBuffer(ctx.cl_ctx(), CL_MEM_READ_WRITE, bytes, nullptr, &err);
  if (err != CL_SUCCESS || !t->mem)
    throw clattn::Error(err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY
                            ? clattn::Status::OutOfMemory : clattn::Status::OpenCLError,
                        "clCreateBuffer(" + std::to_string(bytes) + " bytes) failed: " + std::to_string(err), err);
  return t;
}

TensorPtr upload(const clattn::Context& ctx, const py::array& a0, PDType dt) {
  py::array a = py::array::ensure(a0, py::array::c_style);
  if (!a) invalid("to_device: could not make a C-contiguous array");
  if (size_t(a.itemsize()) != dtype_bytes(dt))
    invalid(std::string("to_device: numpy dtype ") + dtype_repr(a.dtype()) + " has " +
            std::to_string(a.itemsize()) + "-byte items, dtype " + dtype_str(dt) + " needs " +
            std::to_string(dtype_bytes(dt)));
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  auto t = alloc_tensor(ctx, shape, dt);
  if (t->nbytes() > 0) {
    const void* src = a.data();
    size_t n = size_t(t->nbytes());
    cl_int err;
    {
      py::gil_scoped_release nogil;
      err = clEnqueueWriteBuffer(ctx.cl_queue(), t->mem, CL_TRUE, 0, n, src, 0, nullptr, nullptr);
    }
    if (err != CL_SUCCESS)
      throw clattn::Error(clattn::Status::OpenCLError, "clEnqueueWriteBuffer failed: " + std::to_string(err), err);
  }
  return t;
}

TensorPtr tensor_arg(const py::handle& h, const char* name) {
  if (h.is_none()) return nullptr;
  if (!py::isinstance<Tensor>(h))
    invalid(std::string(name) + ": expected a clattn.Tensor, got " + py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>());
  return h.cast<TensorPtr>();
}

cl_mem mem_of(const clattn::Context& ctx, const Tensor* t, const char* name) {
  if (!t) return nullptr;
  if (t->ctx.cl_ctx() != ctx.cl_ctx())
    invalid(std::string(name) + ": tensor lives on another OpenCL context than the op's");
  return t->mem;
}

cl_mem check_tensor(const clattn::Context& ctx, const Tensor* t, const char* name,
                    std::initializer_list<PDType> dtypes, const std::vector<int64_t>& shape) {
  if (!t) invalid(std::string(name) + " is required");
  bool ok = dtypes.size() == 0;
  std::string allowed;
  for (auto d : dtypes) {
    ok = ok || d == t->dtype;
    allowed += std::string(allowed.empty() ? "" : "/") + dtype_str(d);
  }
  if (!ok) invalid(std::string(name) + ": dtype " + dtype_str(t->dtype) + " not allowed here (" + allowed + ")");
  if (!shape.empty()) {
    bool match = shape.size() == t->shape.size();
    for (size_t i = 0; match && i < shape.size(); ++i) match = shape[i] < 0 || shape[i] == t->shape[i];
    if (!match) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i)
        want += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
      invalid(std::string(name) + ": shape " + shape_str(t->shape) + ", expected " + want + "]");
    }
  }
  return mem_of(ctx, t, name);
}

std::vector<int32_t> to_i32(const py::handle& h, const char* name) {
  py::array a = py::array::ensure(h);
  if (!a) invalid(std::string(name) + ": expected an integer array");
  char k = a.dtype().kind();
  if (a.size() > 0 && k != 'i' && k != 'u') invalid(std::string(name) + ": expected integers, got " + dtype_repr(a.dtype()));
  auto a64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  std::vector<int32_t> out(size_t(a64.size()));
  const int64_t* p = a64.data();
  for (size_t i = 0; i < out.size(); ++i) {
    if (p[i] < INT32_MIN || p[i] > INT32_MAX) invalid(std::string(name) + "[" + std::to_string(i) + "] does not fit int32");
    out[i] = int32_t(p[i]);
  }
  return out;
}

// ---- bindings ----------------------------------------------------------------------------
void init_tensor(py::module_& m) {
  m.def("devices", [] {
    py::list out;
    for (const auto& d : clattn::list_devices()) {
      py::dict e = profile_dict(d.profile);
      e["index"] = d.index;
      out.append(e);
    }
    return out;
  }, R"doc(devices() -> list[dict]

Every OpenCL device clattn can see, in platform order, as the probe reports it: one dict
per device with the DeviceProfile fields (vendor, device_name, driver_version,
compute_units, local_mem_bytes, fp16, subgroup_sizes, extensions, ...) plus ``index``,
the number ``Context(device=index)`` and ``CLATTN_DEVICE`` accept.)doc");

  py::class_<clattn::Context>(m, "Context", R"doc(Context(device=None)

A clattn context: one OpenCL device, context and in-order queue that ops enqueue on.

Parameters
----------
device : None | str | int | tuple
    ``None``: ``$CLATTN_DEVICE``, else the first GPU, else the first CPU device.
    ``str``: a vendor (``"nvidia"``, ``"amd"``, ``"intel"``, ``"cpu"``), an index as text,
    or a substring of the device name. ``int``: the global device index of
    :func:`clattn.devices`. ``(pyopencl.Context, pyopencl.CommandQueue)``: adopt an
    engine's own context and queue (retained, never finished behind its back); tensors
    of that context can then be passed zero-copy. ``(cl_context, cl_device_id,
    cl_command_queue)`` ints adopt raw handles.
variants : str
    Kernel variants the context may choose: ``""`` (``$CLATTN_VARIANTS``, unset: all),
    ``"all"``, or ``"portable"`` (no vendor-specific variant such as NVIDIA inline PTX;
    ``profile["portable_only"]`` says which mode is in effect).)doc")
      .def(py::init(&make_context), py::arg("device") = py::none(), py::arg("variants") = "")
      .def_property_readonly("profile", [](const clattn::Context& c) { return profile_dict(c.profile()); },
                             "The device profile as a dict (see :func:`clattn.devices`).")
      .def_property_readonly("device_name", [](const clattn::Context& c) { return c.profile().device_name; },
                             "OpenCL device name.")
      .def_property_readonly("cl_context", [](const clattn::Context& c) { return reinterpret_cast<intptr_t>(c.cl_ctx()); },
                             "The cl_context handle as an int (pyopencl: ``cl.Context.from_int_ptr``).")
      .def_property_readonly("cl_device", [](const clattn::Context& c) { return reinterpret_cast<intptr_t>(c.cl_device()); },
                             "The cl_device_id handle as an int.")
      .def_property_readonly("cl_queue", [](const clattn::Context& c) { return reinterpret_cast<intptr_t>(c.cl_queue()); },
                             "The queue ops enqueue on, as an int (``cl.CommandQueue.from_int_ptr``).")
      .def_property_readonly("device_index", &device_index_of, "Global device index (DLPack device_id).")
      .def("finish", [](const clattn::Context& c) { py::gil_scoped_release nogil; c.finish(); },
           "Blocks until every command on the context's queue has finished.")
      .def("to_device", [](const clattn::Context& c, const py::array& a, py::object dtype) {
             PDType dt = dtype.is_none() ? from_numpy(a.dtype(), "to_device") : parse_dtype(py::str(dtype), "dtype");
             return upload(c, a, dt);
           }, py::arg("array"), py::arg("dtype") = py::none(),
           R"doc(to_device(array, dtype=None) -> Tensor

Copies a numpy array to a new device tensor (blocking). ``dtype`` defaults to the
array's; bf16 data is passed as a uint16 array of raw bits with ``dtype="bf16"`` and fp8
as uint8 with ``dtype="fp8_e4m3"``/``"fp8_e5m2"`` (see :func:`clattn.float_to_bf16`).
Non-contiguous arrays are copied into C order first.)doc")
      .def("empty", [](const clattn::Context& c, const py::object& shape, const std::string& dtype) {
             return alloc_tensor(c, shape_from(shape), parse_dtype(dtype, "dtype"));
           }, py::arg("shape"), py::arg("dtype") = "f32", "empty(shape, dtype='f32') -> Tensor: uninitialised device tensor.")
      .def("zeros", [](const clattn::Context& c, const py::object& shape, const std::string& dtype) {
             auto t = alloc_tensor(c, shape_from(shape), parse_dtype(dtype, "dtype"));
             unsigned char z = 0;
             if (t->nbytes() > 0) {
               cl_int err = clEnqueueFillBuffer(c.cl_queue(), t->mem, &z, 1, 0, size_t(t->nbytes()), 0, nullptr, nullptr);
               if (err != CL_SUCCESS) throw clattn::Error(clattn::Status::OpenCLError, "clEnqueueFillBuffer failed", err);
             }
             return t;
           }, py::arg("shape"), py::arg("dtype") = "f32", "zeros(shape, dtype='f32') -> Tensor: zero-filled device tensor (enqueued).")
      .def("wrap", [](const clattn::Context& c, const py::object& buf, const py::object& shape, const std::string& dtype) {
             cl_mem mem = reinterpret_cast<cl_mem>(int_ptr(buf, "wrap"));
             py::object owner = py::isinstance<py::int_>(buf) ? py::object() : buf;
             return wrap_mem(c, mem, shape_from(shape), parse_dtype(dtype, "dtype"), owner, "wrap");
           }, py::arg("buffer"), py::arg("shape"), py::arg("dtype"),
           R"doc(wrap(buffer, shape, dtype) -> Tensor

Zero-copy view of a caller's buffer: a ``pyopencl.Buffer`` (kept alive by the tensor) or a
raw ``cl_mem`` handle as an int (the caller keeps it alive; clattn retains the handle).
The buffer must belong to this context and hold at least ``prod(shape) * itemsize``
bytes; both are checked.)doc")
      .def("__repr__", [](const clattn::Context& c) { return "<clattn.Context on '" + c.profile().device_name + "'>"; });

  py::class_<Tensor, TensorPtr>(m, "Tensor", R"doc(A device tensor: a cl_mem buffer on a clattn context, with shape and dtype.

Made by :meth:`Context.to_device`, :meth:`Context.empty`, :meth:`Context.zeros`,
:meth:`Context.wrap` (zero-copy) or :func:`clattn.from_dlpack`. Ops return them. Row-major
and contiguous, always starting at offset 0 of its buffer. dtype is a string: f32 f16 bf16
fp8_e4m3 fp8_e5m2 i32 i64 u8 i8.)doc")
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape)); }, "Shape tuple.")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_str(t.dtype)); }, "dtype string.")
      .def_property_readonly("ndim", [](const Tensor& t) { return t.shape.size(); }, "Number of dimensions.")
      .def_property_readonly("nbytes", &Tensor::nbytes, "Bytes the shape covers.")
      .def_property_readonly("buffer_bytes", &Tensor::buffer_bytes, "Bytes of the underlying cl_mem.")
      .def_property_readonly("context", [](const Tensor& t) { return t.ctx; }, "The clattn.Context it lives on.")
      .def_property_readonly("int_ptr", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.mem); },
                             "The cl_mem handle as an int (pyopencl: ``cl.Buffer.from_int_ptr(h, retain=True)``).")
      .def_property_readonly("data_ptr", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.mem); },
                             "Alias of int_ptr.")
      .def("__len__", [](const Tensor& t) -> int64_t { return t.shape.empty() ? 0 : t.shape[0]; })
      .def("numpy", [](const Tensor& t) {
             py::array a(numpy_dtype(t.dtype), t.shape);
             if (t.nbytes() > 0) {
               void* dst = a.mutable_data();
               size_t n = size_t(t.nbytes());
               cl_int err;
               {
                 py::gil_scoped_release nogil;
                 err = clEnqueueReadBuffer(t.ctx.cl_queue(), t.mem, CL_TRUE, 0, n, dst, 0, nullptr, nullptr);
               }
               if (err != CL_SUCCESS)
                 throw clattn::Error(clattn::Status::OpenCLError, "clEnqueueReadBuffer failed: " + std::to_string(err), err);
             }
             return a;
           }, R"doc(numpy() -> numpy.ndarray

Blocking copy to the host (waits for the context's queue up to this read). bf16 comes back
as uint16 raw bits (:func:`clattn.bf16_to_float` converts), fp8 as uint8.)doc")
      .def("__array__", [](py::object self, py::object dtype, py::object copy) {
             if (!copy.is_none() && !copy.cast<bool>())
               throw py::value_error("clattn.Tensor.__array__(copy=False): device memory is not host-addressable, "
                                     "the array is always a copy");
             py::object a = self.attr("numpy")();
             if (!dtype.is_none()) a = a.attr("astype")(dtype, py::arg("copy") = false);
             return a;
           }, py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
           R"doc(__array__(dtype=None, copy=None) -> numpy.ndarray

numpy's conversion protocol (``np.asarray(t)``, numpy 1 and 2 signatures): a blocking copy
to the host like :meth:`numpy` (bf16 as uint16 bits, fp8 as uint8), cast to ``dtype`` when
given. ``copy=False`` raises ValueError: device memory cannot be viewed in place.)doc")
      .def("copy_from", [](Tensor& t, const py::array& a0) {
             py::array a = py::array::ensure(a0, py::array::c_style);
             if (!a || size_t(a.nbytes()) != size_t(t.nbytes()) || size_t(a.itemsize()) != dtype_bytes(t.dtype))
               invalid("copy_from: array of " + std::to_string(a ? a.nbytes() : 0) + " bytes for a tensor " +
                       shape_str(t.shape) + " " + dtype_str(t.dtype));
             const void* src = a.data();
             size_t n = size_t(t.nbytes());
             py::gil_scoped_release nogil;
             cl_int err = clEnqueueWriteBuffer(t.ctx.cl_queue(), t.mem, CL_TRUE, 0, n, src, 0, nullptr, nullptr);
             if (err != CL_SUCCESS) throw clattn::Error(clattn::Status::OpenCLError, "clEnqueueWriteBuffer failed", err);
           }, py::arg("array"), "copy_from(array): blocking host -> device copy into this tensor (same byte size).")
      .def("view", [](const Tensor& t, const py::object& shape, py::object dtype) {
             auto n = std::make_shared<Tensor>(t.ctx);
             n->shape = shape_from(shape);
             n->dtype = dtype.is_none() ? t.dtype : parse_dtype(py::str(dtype), "dtype");
             if (n->nbytes() != t.nbytes())
               invalid("view: shape " + shape_str(n->shape) + " " + dtype_str(n->dtype) + " covers " +
                       std::to_string(n->nbytes()) + " bytes, the tensor " + std::to_string(t.nbytes()));
             clRetainMemObject(t.mem);
             n->mem = t.mem;
             n->owner = t.owner;
             return n;
           }, py::arg("shape"), py::arg("dtype") = py::none(),
           "view(shape, dtype=None) -> Tensor: same buffer, another shape (and dtype) of the same byte size.")
      .def("reshape", [](py::object self, py::args shape) {
             py::object s = shape.size() == 1 ? py::object(shape[0]) : py::object(shape);
             return self.attr("view")(s);
           }, "reshape(*shape) -> Tensor: a view with another shape (no copy).")
      .def("clone", [](const Tensor& t) {
             auto n = alloc_tensor(t.ctx, t.shape, t.dtype);
             if (t.nbytes() > 0) {
               cl_int err = clEnqueueCopyBuffer(t.ctx.cl_queue(), t.mem, n->mem, 0, 0, size_t(t.nbytes()), 0, nullptr, nullptr);
               if (err != CL_SUCCESS) throw clattn::Error(clattn::Status::OpenCLError, "clEnqueueCopyBuffer failed", err);
             }
             return n;
           }, "clone() -> Tensor: a device copy (enqueued).")
      .def("__dlpack_device__", [](const Tensor& t) { return py::make_tuple(kDLOpenCL, device_index_of(t.ctx)); },
           "(kDLOpenCL = 4, global device index).")
      .def("__dlpack__", [](py::object self, py::object stream, py::object max_version, py::object dl_device,
                            py::object copy) {
             auto t = self.cast<TensorPtr>();
             if (!copy.is_none() && copy.cast<bool>())
               throw py::buffer_error("clattn.Tensor.__dlpack__: copy=True is not supported (zero-copy export only)");
             if (!dl_device.is_none()) {
               auto dev = dl_device.cast<std::pair<int, int>>();
               if (dev.first != kDLOpenCL || dev.second != device_index_of(t->ctx))
                 throw py::buffer_error("clattn.Tensor.__dlpack__: export to another device is not supported");
             }
             // Producer's work must be visible to a consumer on any queue: finish ours.
             {
               py::gil_scoped_release nogil;
               t->ctx.finish();
             }
             auto* ec = new ExportCtx{t, t->shape};
             auto* m = new DLManagedTensor{};
             m->dl_tensor.data = t->mem;
             m->dl_tensor.device = {kDLOpenCL, device_index_of(t->ctx)};
             m->dl_tensor.ndim = int32_t(ec->shape.size());
             m->dl_tensor.dtype = to_dl(t->dtype);
             m->dl_tensor.shape = ec->shape.data();
             m->dl_tensor.strides = nullptr;  // compact row-major
             m->dl_tensor.byte_offset = 0;
             m->manager_ctx = ec;
             m->deleter = export_deleter;
             PyObject* cap = PyCapsule_New(m, "dltensor", capsule_destructor);
             if (!cap) {
               export_deleter(m);
               throw py::error_already_set();
             }
             return py::reinterpret_steal<py::object>(cap);
           }, py::arg("stream") = py::none(), py::kw_only(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           R"doc(__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None) -> PyCapsule

DLPack export with device type kDLOpenCL (4): ``data`` is the cl_mem handle (byte_offset
0, compact strides), an unversioned ``dltensor`` capsule whatever ``max_version`` asks.
The context's queue is finished first, so a consumer may read on any queue of the same
cl_context. ``stream`` is accepted and ignored; ``copy=True`` and another ``dl_device``
raise BufferError.)doc")
      .def("__repr__", [](const Tensor& t) {
        return "<clattn.Tensor shape=" + shape_str(t.shape) + " dtype=" + dtype_str(t.dtype) + ">";
      });

  m.def("_from_dlpack_capsule", [](const clattn::Context& ctx, py::capsule cap) {
    if (std::string(cap.name() ? cap.name() : "") != "dltensor")
      invalid("from_dlpack: expected an unconsumed 'dltensor' capsule");
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (!mt) throw py::error_already_set();
    // Take ownership: mark consumed; a Python capsule of our own calls the deleter later.
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
    PyCapsule_SetDestructor(cap.ptr(), nullptr);
    py::capsule keeper(mt, [](void* p) {
      auto* m = static_cast<DLManagedTensor*>(p);
      if (m->deleter) m->deleter(m);
    });
    const DLTensor& d = mt->dl_tensor;
    if (d.device.device_type != kDLOpenCL)
      invalid("from_dlpack: device type " + std::to_string(d.device.device_type) + " is not kDLOpenCL (4)");
    if (d.byte_offset != 0) invalid("from_dlpack: byte_offset " + std::to_string(d.byte_offset) + " != 0 is not supported");
    std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
    if (d.strides) {
      int64_t expect = 1;
      for (int i = d.ndim - 1; i >= 0; --i) {
        if (shape[size_t(i)] != 1 && d.strides[i] != expect) invalid("from_dlpack: only compact row-major tensors are supported");
        expect *= shape[size_t(i)];
      }
    }
    return wrap_mem(ctx, static_cast<cl_mem>(d.data), shape, from_dl(d.dtype), keeper, "from_dlpack");
  });
}

}  // namespace clattn_py
