"""Internal helpers: turning the buffers callers pass into clattn Tensors, dtype names,
context selection and argument checks. Not public API."""
import threading

import numpy as np

from . import _clattn
from ._clattn import Context, Tensor, Error

_DTYPE_ALIASES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8_e4m3": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "i32": "i32", "int32": "i32", "i64": "i64", "int64": "i64", "u8": "u8", "uint8": "u8",
    "i8": "i8", "int8": "i8", "i4": "i4", "int4": "i4",
}
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "i32": 4, "i64": 8, "u8": 1, "i8": 1}
_FROM_NUMPY = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
               np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8"}


def error(msg, status="InvalidArgument"):
    """A clattn.Error raised by the Python layer (same attributes as the library's)."""
    e = Error(msg)
    e.status_code = {"InvalidArgument": 1, "Unsupported": 2}.get(status, 7)
    e.status = _clattn.status_name(e.status_code)
    e.cl_error = 0
    return e


def dtype_name(dt, arg="dtype"):
    """Normalises a dtype given as a string, numpy dtype or torch-like object to clattn's
    short names (f32 f16 bf16 fp8_e4m3 fp8_e5m2 i32 i64 u8 i8, and i4: the int4 KV cache
    format, whose tensors are u8 nibble pairs); None stays None."""
    if dt is None:
        return None
    if isinstance(dt, str):
        s = dt[6:] if dt.startswith("torch.") else dt
    elif isinstance(dt, np.dtype) or isinstance(dt, type):
        try:
            d = np.dtype(dt)
        except TypeError:
            raise error(f"{arg}: unsupported dtype {dt!r}")
        if d == np.uint16:
            raise error(f"{arg}: numpy has no bfloat16; say dtype='bf16' for uint16 bit patterns")
        if d not in _FROM_NUMPY:
            raise error(f"{arg}: unsupported numpy dtype {d}")
        return _FROM_NUMPY[d]
    else:
        s = str(dt)
        s = s[6:] if s.startswith("torch.") else s
    if s not in _DTYPE_ALIASES:
        raise error(f"{arg}: unknown dtype {dt!r} (f32 f16 bf16 fp8_e4m3 fp8_e5m2 i32 i64 u8 i8 i4)")
    return _DTYPE_ALIASES[s]


# --------------------------------------------------------------------------- contexts
_default_lock = threading.Lock()
_default_ctx = None
_adopted = {}  # pyopencl context int_ptr -> clattn.Context adopting it


def default_context():
    """The process-wide default clattn.Context (created on first use: $CLATTN_DEVICE, else
    the first GPU, else the first CPU device)."""
    global _default_ctx
    with _default_lock:
        if _default_ctx is None:
            _default_ctx = Context()
        return _default_ctx


def set_default_context(ctx):
    """Makes ctx (a clattn.Context) the one ops use when no argument carries a context."""
    global _default_ctx
    if not isinstance(ctx, Context):
        raise error("set_default_context: expected a clattn.Context")
    with _default_lock:
        _default_ctx = ctx


def _is_pyopencl_array(x):
    return type(x).__module__.startswith("pyopencl") and hasattr(x, "base_data") and hasattr(x, "queue")


def _is_pyopencl_buffer(x):
    return type(x).__module__.startswith("pyopencl") and hasattr(x, "int_ptr") and hasattr(x, "size") \
        and not hasattr(x, "queue")


def context_of(*xs, ctx=None):
    """The context an op runs on: ctx if given, else the first clattn Tensor's, else one
    adopting the first pyopencl Array's context and queue, else the default context."""
    if ctx is not None:
        return ctx
    for x in xs:
        if isinstance(x, Tensor):
            return x.context
    for x in xs:
        if _is_pyopencl_array(x):
            key = x.context.int_ptr
            with _default_lock:
                c = _adopted.get(key)
                if c is None:
                    c = Context((x.context, x.queue))
                    _adopted[key] = c
            return c
    return default_context()


def is_raw_buffer(x):
    """True for a pyopencl Buffer or a raw cl_mem int (no shape/dtype of its own)."""
    return _is_pyopencl_buffer(x) or (isinstance(x, int) and not isinstance(x, bool))


def as_tensor(ctx, x, name, dtype=None, shape=None):
    """Turns an op argument into a clattn Tensor on ctx, zero-copy where it can:
    clattn.Tensor (dtype override allowed when the item size matches), pyopencl Array
    (C-contiguous, offset 0; its numpy dtype, or `dtype` for bf16/fp8 bit patterns),
    pyopencl Buffer or raw cl_mem int (shape and dtype required), an object with
    __dlpack__ (kDLOpenCL), or a numpy array / array-like (copied to the device)."""
    if x is None:
        return None
    dt = dtype_name(dtype, name + " dtype") if dtype is not None else None
    if isinstance(x, Tensor):
        if x.context.cl_context != ctx.cl_context:
            raise error(f"{name}: tensor lives on another OpenCL context than the op's")
        if dt is not None and dt != x.dtype:
            if _ITEMSIZE[dt] != _ITEMSIZE[x.dtype]:
                raise error(f"{name}: dtype {x.dtype}, expected {dt}")
            x = x.view(x.shape, dt)
        return x
    if _is_pyopencl_array(x):
        if not x.flags.c_contiguous:
            raise error(f"{name}: non-contiguous pyopencl Array (strides {x.strides}); pass a contiguous copy")
        if x.offset != 0:
            raise error(f"{name}: pyopencl Array with a nonzero offset ({x.offset} bytes) cannot be passed zero-copy")
        if dt is None:
            dt = dtype_name(x.dtype, name)
        elif _ITEMSIZE[dt] != x.dtype.itemsize:
            raise error(f"{name}: Array dtype {x.dtype} does not hold {dt}")
        return ctx.wrap(x.base_data, tuple(x.shape), dt)
    if is_raw_buffer(x):
        if shape is None or dt is None:
            raise error(f"{name}: a pyopencl Buffer or cl_mem handle needs explicit shape and dtype")
        return ctx.wrap(x, tuple(shape), dt)
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
        return from_dlpack(x, ctx=ctx, dtype=dt)
    a = np.asarray(x)
    if dt is None:
        dt = dtype_name(a.dtype, name)
    elif dt in ("f32", "f16") and a.dtype.kind == "f" and a.dtype.itemsize != _ITEMSIZE[dt]:
        a = a.astype(np.float32 if dt == "f32" else np.float16)
    elif dt == "bf16" and a.dtype.kind == "f":
        a = float_to_bf16(a)
    elif dt in ("i32", "i64") and a.dtype.kind in "iu":
        a = a.astype(np.int32 if dt == "i32" else np.int64)
    if a.dtype.itemsize != _ITEMSIZE[dt]:
        raise error(f"{name}: numpy dtype {a.dtype} does not hold {dt}")
    return ctx.to_device(a, dt)


def is_host_array(x):
    """True for a host object (numpy array, list, scalar) that as_tensor copies to the
    device; False for device buffers it uses in place."""
    if x is None or isinstance(x, Tensor) or _is_pyopencl_array(x) or is_raw_buffer(x):
        return False
    return isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__")


# numpy dtype that holds each clattn dtype bit for bit (bf16 and fp8 as raw bits).
_NP_BITS = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8,
            "i32": np.int32, "i64": np.int64, "u8": np.uint8, "i8": np.int8}


class Writeback:
    """Destination arguments of one op. Device buffers (clattn Tensors, pyopencl objects,
    DLPack tensors) are written in place by the op itself. A numpy array was copied to the
    device by as_tensor; track() records it and done() copies the result back into it after
    the op (a blocking read), so numpy destinations are written in place too. Host objects
    that cannot take the result (lists, read-only arrays, a dtype that does not hold the
    result's bits) are rejected before the op runs."""

    def __init__(self):
        self._pending = []

    def track(self, x, name, make):
        """The device tensor for destination argument x, made by make(): a numpy x is checked
        first (lists and read-only arrays cannot be written) and recorded for done()."""
        if x is None or not is_host_array(x):
            return make()
        if not isinstance(x, np.ndarray):
            raise error(f"{name}: a {type(x).__name__} cannot be written in place; "
                        "pass a numpy array or a device buffer")
        if not x.flags.writeable:
            raise error(f"{name}: the numpy array is read-only")
        t = make()
        want = np.dtype(_NP_BITS[t.dtype])
        if x.dtype != want:  # e.g. float data converted to bf16 bits on the way in
            raise error(f"{name}: a numpy {x.dtype} array cannot receive {t.dtype} results in place "
                        f"(pass {want.name}" + (" bit patterns)" if t.dtype in ("bf16", "fp8_e4m3", "fp8_e5m2") else ")"))
        self._pending.append((x, t))
        return t

    def done(self):
        """Copies every tracked result back into its numpy array (blocking)."""
        for x, t in self._pending:
            x[...] = t.numpy().reshape(x.shape)
        self._pending = []


def result(x, t):
    """What an op returns for destination x written through tensor t: the caller's numpy
    array itself when x was one (written in place), else the device tensor."""
    return x if isinstance(x, np.ndarray) else t


# --------------------------------------------------------------------------- LSE base
LOG2E = 1.4426950408889634  # natural -> base 2
LN2 = 0.6931471805599453    # base 2 -> natural


def rescale_lse(ctx, t, factor):
    """t *= factor on the device (enqueued on ctx's queue); t is an f32 clattn Tensor."""
    if t is not None:
        _clattn._scale_f32(ctx, t, float(factor))


def natural_lse(ctx, t, src):
    """A natural-log copy of the base-2 LSE tensor t (made from argument src): t itself,
    rescaled, when as_tensor made it from a host array (a private upload), else a device
    clone, so the caller's buffer is not changed."""
    n = t if is_host_array(src) else t.clone()
    rescale_lse(ctx, n, LN2)
    return n


def scale_value(x, name):
    """A dequantisation scale as one float: None -> 1.0, a number, or a one-element array
    or tensor (read on the host). Several values (per-head scales) are rejected: the
    library's kernels take one scale per tensor."""
    if x is None:
        return 1.0
    if isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool):
        return float(x)
    a = x.numpy() if isinstance(x, Tensor) else (x.get() if _is_pyopencl_array(x) else np.asarray(x))
    if a.size != 1:
        raise error(f"{name}: {a.size} values (per-head scales) are not supported: clattn's kernels take one "
                    "dequantisation scale per tensor", "Unsupported")
    if a.dtype.kind not in "fiu":
        raise error(f"{name}: expected a number, got dtype {a.dtype}")
    return float(a.reshape(-1)[0])


def from_dlpack(obj, ctx=None, dtype=None):
    """Imports a DLPack tensor with device type kDLOpenCL (4) zero-copy.

    obj: any object with ``__dlpack__`` (or a 'dltensor' capsule). ctx: the clattn.Context
    whose cl_context owns the buffer (default: the producer's when it is a clattn Tensor,
    else the default context). The tensor keeps the producer's DLManagedTensor alive and
    calls its deleter when it dies. Only compact row-major tensors at byte_offset 0."""
    if isinstance(obj, Tensor) and ctx is None:
        ctx = obj.context
    if ctx is None:
        ctx = default_context()
    if hasattr(obj, "__dlpack_device__"):
        dev_type, _ = obj.__dlpack_device__()
        if int(dev_type) != 4:
            raise error(f"from_dlpack: device type {int(dev_type)} is not kDLOpenCL (4)")
    cap = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    t = _clattn._from_dlpack_capsule(ctx, cap)
    if dtype is not None:
        dt = dtype_name(dtype)
        if dt != t.dtype:
            if _ITEMSIZE[dt] != _ITEMSIZE[t.dtype]:
                raise error(f"from_dlpack: dtype {t.dtype}, expected {dt}")
            t = t.view(t.shape, dt)
    return t


def check(t, name, dtypes=None, shape=None):
    """Checks a Tensor's dtype (one of `dtypes`) and shape (None entries = any)."""
    if dtypes is not None and t.dtype not in dtypes:
        raise error(f"{name}: dtype {t.dtype}, expected {' or '.join(dtypes)}")
    if shape is not None:
        s = tuple(t.shape)
        if len(s) != len(shape) or any(w is not None and w != v for w, v in zip(shape, s)):
            want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
            raise error(f"{name}: shape {list(s)}, expected {want}")
    return t


def host_ints(x, name, dtype=np.int64):
    """A flat host numpy copy (``dtype``) of an integer array (numpy, list, clattn Tensor,
    pyopencl Array: device arrays are copied back)."""
    if x is None:
        return None
    if isinstance(x, Tensor):
        x = x.numpy()
    elif _is_pyopencl_array(x):
        x = x.get()
    a = np.asarray(x)
    if a.size and a.dtype.kind not in "iu":
        raise error(f"{name}: expected integers, got {a.dtype}")
    info = np.iinfo(dtype)
    if a.size and (a.max() > info.max or a.min() < info.min):
        raise error(f"{name}: values do not fit {np.dtype(dtype).name}")
    return np.ascontiguousarray(a.reshape(-1), dtype=dtype)


def host_i32(x, name):
    """A host int32 numpy copy of an index array (numpy, list, clattn Tensor, pyopencl Array)."""
    return host_ints(x, name, np.int32)


# ------------------------------------------------------------------------ bf16 / fp8
def float_to_bf16(x):
    """float array -> uint16 bf16 bit patterns (round to nearest even; NaN kept quiet)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_to_float(x):
    """uint16 bf16 bit patterns (array or clattn Tensor) -> float32 array."""
    if isinstance(x, Tensor):
        x = x.numpy()
    u = np.ascontiguousarray(x, dtype=np.uint16).astype(np.uint32) << 16
    return u.view(np.float32)
