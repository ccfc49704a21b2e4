"""FlashInfer-shaped attention wrappers: paged decode, paged and ragged prefill, KV append,
merge_state(s). Semantics follow FlashInfer where the contract matches; differences are
listed in docs/python.md and in each docstring."""
import numpy as np

from . import _clattn
from ._util import as_tensor, check, context_of, dtype_name, error, host_i32, is_raw_buffer, _ITEMSIZE

_FLOAT_IO = ("f32", "f16", "bf16")
_KV_DTYPES = ("f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2")


def _scale_or_zero(x):
    return 0.0 if x is None else float(x)


def _check_pos_encoding(mode):
    if mode not in (None, "NONE"):
        raise error(f"pos_encoding_mode={mode!r}: clattn applies no RoPE inside attention; "
                    "apply it to q/k before the call and pass 'NONE'", "Unsupported")


def _split_kv_cache(paged_kv_cache, name="paged_kv_cache"):
    if isinstance(paged_kv_cache, (tuple, list)):
        if len(paged_kv_cache) != 2:
            raise error(f"{name}: expected a (k_cache, v_cache) pair")
        return paged_kv_cache[0], paged_kv_cache[1]
    raise error(f"{name}: pass a (k_cache, v_cache) tuple; the single [num_pages, 2, ...] "
                "tensor form of FlashInfer is not supported (see docs/python.md)", "Unsupported")


def _cache_dims(k, layout):
    """(num_pages, page_size, num_kv_heads, head_dim) of a 4-D cache tensor."""
    if len(k.shape) != 4:
        raise error(f"k_cache: shape {list(k.shape)}, expected 4 dims ({layout})")
    n, a, b, d = k.shape
    return (n, a, b, d) if layout == "NHD" else (n, b, a, d)


def _cache_shape(layout, num_pages, page_size, num_kv_heads, head_dim):
    if layout == "NHD":
        return (num_pages, page_size, num_kv_heads, head_dim)
    return (num_pages, num_kv_heads, page_size, head_dim)


def _workspace_context(float_workspace_buffer, ctx):
    if isinstance(float_workspace_buffer, _clattn.Context):
        return float_workspace_buffer, None
    if float_workspace_buffer is None:
        return context_of(ctx=ctx), None
    c = context_of(float_workspace_buffer, ctx=ctx)
    ws = as_tensor(c, float_workspace_buffer, "float_workspace_buffer")
    return c, ws


class _Workspace:
    """The caller's float workspace when large enough, else one the wrapper grows."""

    def __init__(self, ctx, given):
        self._ctx, self._given, self._own = ctx, given, None

    def get(self, nbytes):
        if nbytes <= 0:
            return None
        if self._given is not None and self._given.buffer_bytes >= nbytes:
            return self._given
        if self._own is None or self._own.buffer_bytes < nbytes:
            self._own = self._ctx.empty((int(nbytes),), "u8")
        return self._own


class BatchDecodeWithPagedKVCacheWrapper:
    r"""Wrapper class for decode attention with paged kv-cache (first proposed in
    vLLM) for batch of requests, shaped like ``flashinfer.BatchDecodeWithPagedKVCacheWrapper``.

    Check our tutorial (docs/python.md) for page table layout.

    Example
    -------
    >>> import numpy as np, clattn
    >>> ctx = clattn.Context()
    >>> num_layers, num_qo_heads, num_kv_heads, head_dim = 2, 8, 2, 128
    >>> max_num_pages, page_size, batch_size = 16, 16, 4
    >>> decode_wrapper = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, "NHD")
    >>> kv_page_indices = np.arange(max_num_pages, dtype=np.int32)
    >>> kv_page_indptr = np.array([0, 3, 7, 12, 16], dtype=np.int32)
    >>> kv_last_page_len = np.array([1, 7, 14, 4], dtype=np.int32)
    >>> decode_wrapper.plan(kv_page_indptr, kv_page_indices, kv_last_page_len,
    ...     num_qo_heads, num_kv_heads, head_dim, page_size,
    ...     q_data_type="float16", kv_data_type="float16")
    >>> q = ctx.to_device(np.random.randn(batch_size, num_qo_heads, head_dim).astype(np.float16))
    >>> shape = (max_num_pages, page_size, num_kv_heads, head_dim)
    >>> k_cache = ctx.to_device(np.random.randn(*shape).astype(np.float16))
    >>> v_cache = ctx.to_device(np.random.randn(*shape).astype(np.float16))
    >>> o = decode_wrapper.run(q, (k_cache, v_cache))   # one call per layer
    >>> o.shape
    (4, 8, 128)

    Note
    ----
    ``plan`` is called once per batch (it validates the metadata, computes the split-K
    schedule, builds/loads the kernel and uploads the page indices); ``run`` is called
    once per layer and only enqueues. Outputs are clattn Tensors on the wrapper's
    context (``.numpy()`` copies to the host).
    """

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False,
                 use_tensor_cores=False, paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                 paged_kv_last_page_len_buffer=None, backend="auto", *, ctx=None):
        r"""Constructor of :class:`BatchDecodeWithPagedKVCacheWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            A device buffer (any dtype, used as bytes) for split-K partial results, or a
            Context to run on, or None for the default context. When the planned batch
            needs more workspace than the buffer holds, the wrapper allocates its own.
        kv_layout : str
            ``"NHD"`` ([num_pages, page_size, num_kv_heads, head_dim]) or ``"HND"``.
        use_cuda_graph, use_tensor_cores, paged_kv_*_buffer, backend :
            Accepted for FlashInfer compatibility and ignored (OpenCL has no graphs; the
            kernel variant comes from the device profile).
        ctx : clattn.Context, optional
            The context to run on (keyword only).
        """
        if kv_layout not in ("NHD", "HND"):
            raise error(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
        self._ctx, ws = _workspace_context(float_workspace_buffer, ctx)
        self._ws = _Workspace(self._ctx, ws)
        self._kv_layout = kv_layout
        self._plan = None

    @property
    def context(self):
        """The clattn.Context this wrapper runs on."""
        return self._ctx

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, o_data_type=None, deterministic=False, max_splits=0, validate=True):
        r"""Plan batch decode for given problem specification.

        Parameters
        ----------
        indptr : array of int32, shape ``[batch_size + 1]``
            The indptr of the paged kv cache.
        indices : array of int32, shape ``[qo_indptr[-1]]``
            The page indices of the paged kv cache.
        last_page_len : array of int32, shape ``[batch_size]``
            The number of entries in the last page of each request in the paged kv cache.
        num_qo_heads : int
            The number of query/output heads.
        num_kv_heads : int
            The number of key/value heads (``num_qo_heads % num_kv_heads == 0``).
        head_dim : int
            The dimension of the heads (64, 80, 96, 128, 192 or 256).
        page_size : int
            The page size of the paged kv cache (a power of two up to 256).
        pos_encoding_mode : str
            Only ``"NONE"``: apply RoPE before calling (clattn.Error otherwise).
        window_left : int
            The left (inclusive) window size for the attention window, -1 = no window.
        logits_soft_cap : Optional[float]
            ``s = cap * tanh(s / cap)`` after scaling when > 0; None or 0 = off.
        q_data_type : str | dtype
            Query (and default output) dtype: float32, float16 or bfloat16.
        kv_data_type : str | dtype, optional
            KV cache dtype: float32, float16, bfloat16, fp8_e4m3, fp8_e5m2 (default: q's).
        data_type : optional
            Legacy alias of ``kv_data_type`` (FlashInfer).
        sm_scale : Optional[float]
            The scale used in softmax, default ``1 / sqrt(head_dim)``.
        rope_scale, rope_theta, non_blocking :
            Accepted for compatibility and ignored.
        o_data_type : optional
            Output dtype (default: ``q_data_type``).
        deterministic : bool
            Fixed split tiles: a request's output bits do not depend on its batch mates.
        max_splits : int
            KV chunks per request (0 = planner's choice, 1 = never split).
        validate : bool
            Run the O(pages) metadata validation (page ids in range, ...).

        Note
        ----
        The metadata is read on the host (device arrays are copied back once); the page
        indices are uploaded to a device copy the ``run`` calls read.
        """
        _check_pos_encoding(pos_encoding_mode)
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type if kv_data_type is not None else data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        indptr_h = host_i32(indptr, "indptr")
        indices_h = host_i32(indices, "indices")
        last_h = host_i32(last_page_len, "last_page_len")
        num_pages = int(indices_h.max()) + 1 if indices_h.size else 1
        plan = _clattn._decode_plan(self._ctx, indptr_h, indices_h, last_h, int(page_size), max(num_pages, 1),
                                    int(num_kv_heads), int(head_dim), self._kv_layout, kv_dt, int(num_qo_heads),
                                    q_dt, o_dt, _scale_or_zero(sm_scale), _scale_or_zero(logits_soft_cap),
                                    int(window_left), bool(deterministic), int(max_splits), bool(validate))
        self._indices = self._ctx.to_device(indices_h if indices_h.size else np.zeros(1, np.int32), "i32")
        self._plan = plan
        self._window = int(window_left)
        self._dims = dict(batch_size=len(last_h), num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim=int(head_dim), page_size=int(page_size), num_pages=num_pages,
                          q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, sinks=None, enable_pdl=None, window_left=None):
        r"""Compute batch decode attention between query and paged kv cache.

        Parameters
        ----------
        q : Tensor-like, shape ``[batch_size, num_qo_heads, head_dim]``
            The query tensor (clattn.Tensor, pyopencl Array, DLPack tensor or numpy array).
        paged_kv_cache : Tuple[Tensor-like, Tensor-like]
            ``(k_cache, v_cache)``, each ``[max_num_pages, page_size, num_kv_heads,
            head_dim]`` (NHD) or ``[max_num_pages, num_kv_heads, page_size, head_dim]`` (HND).
        q_scale : Optional[float]
            Only None or 1.0 (fold a query scale into ``sm_scale`` at plan time instead).
        k_scale, v_scale : Optional[float]
            Per-tensor dequantisation scales of an fp8 cache (loaded = stored * scale).
        out : Optional[Tensor], shape ``[batch_size, num_qo_heads, head_dim]``
            Output buffer (allocated when None).
        lse : Optional[Tensor], shape ``[batch_size, num_qo_heads]`` float32
            Buffer for the log-sum-exp (allocated when None and return_lse).
        return_lse : bool
            Whether to return the logsumexp of attention scores (natural log).
        sinks : Optional[Tensor-like], ``[num_qo_heads]`` float32
            Attention-sink logits (gpt-oss).

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` ``[batch_size, num_qo_heads, head_dim]``, and the lse
            ``[batch_size, num_qo_heads]`` when ``return_lse``.
        """
        if self._plan is None:
            raise error("run() before plan()")
        if q_scale not in (None, 1.0):
            raise error("q_scale is not supported: scale q or sm_scale instead", "Unsupported")
        if window_left is not None and window_left != self._window:
            raise error("window_left at run time must match plan()", "Unsupported")
        d = self._dims
        ctx = self._ctx
        k_cache, v_cache = _split_kv_cache(paged_kv_cache)
        qshape = (d["batch_size"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        k_cache = _cache_arg(ctx, k_cache, "k_cache", self._kv_layout, d)
        v_cache = _cache_arg(ctx, v_cache, "v_cache", self._kv_layout, d)
        _check_cache(k_cache, v_cache, self._kv_layout, d)
        if out is None:
            out = ctx.empty(qshape, d["o_dtype"])
        else:
            out = check(_arg(ctx, out, "out", qshape, d["o_dtype"]), "out", (d["o_dtype"],), qshape)
        if lse is None and return_lse:
            lse = ctx.empty(qshape[:2], "f32")
        elif lse is not None:
            lse = check(_arg(ctx, lse, "lse", qshape[:2], "f32"), "lse", ("f32",), qshape[:2])
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        ws = self._ws.get(self._plan.workspace_bytes)
        _clattn._decode_run(ctx, self._plan, q, k_cache, v_cache, self._indices, out, lse, ws, sinks,
                            1.0 if k_scale is None else float(k_scale), 1.0 if v_scale is None else float(v_scale))
        return (out, lse) if return_lse else out

    forward = run

    def end_forward(self):
        """No-op (FlashInfer compatibility)."""


def _arg(ctx, x, name, shape, dtype):
    """as_tensor where the wrapper knows the shape and dtype: raw Buffers / cl_mem ints are
    wrapped with them, uint16/uint8 arrays read as `dtype` bits, others keep their own."""
    if is_raw_buffer(x):
        return as_tensor(ctx, x, name, dtype, shape)
    return as_tensor(ctx, x, name, dtype if _is_bits(x, dtype) else None)


def _cache_arg(ctx, x, name, layout, d):
    """A paged cache argument; for a raw buffer the page count comes from its size."""
    if is_raw_buffer(x):
        per_page = d["page_size"] * d["num_kv_heads"] * d["head_dim"] * _ITEMSIZE[d["kv_dtype"]]
        n = ctx.wrap(x, (1,), "u8").buffer_bytes // per_page
        return as_tensor(ctx, x, name, d["kv_dtype"],
                         _cache_shape(layout, n, d["page_size"], d["num_kv_heads"], d["head_dim"]))
    return as_tensor(ctx, x, name, d["kv_dtype"] if _is_bits(x, d["kv_dtype"]) else None)


def _is_bits(x, want):
    """True when x is a numpy/pyopencl array of raw bits (uint16/uint8) and the wrapper
    expects bf16/fp8, which numpy cannot name: the bits are then read as `want`."""
    dt = getattr(x, "dtype", None)
    if dt is None or isinstance(dt, str) or want not in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        return False
    return np.dtype(dt) in (np.dtype(np.uint16), np.dtype(np.uint8))


def _check_cache(k_cache, v_cache, layout, d):
    check(k_cache, "k_cache", (d["kv_dtype"],))
    check(v_cache, "v_cache", (d["kv_dtype"],), tuple(k_cache.shape))
    n, p, h, hd = _cache_dims(k_cache, layout)
    if (p, h, hd) != (d["page_size"], d["num_kv_heads"], d["head_dim"]):
        want = _cache_shape(layout, None, d["page_size"], d["num_kv_heads"], d["head_dim"])
        raise error(f"k_cache: shape {list(k_cache.shape)}, expected "
                    f"[{', '.join('*' if w is None else str(w) for w in want)}] ({layout})")
    if n < d["num_pages"]:
        raise error(f"k_cache: {n} pages, the planned indices reach page {d['num_pages'] - 1}")
    return n


def _pack_custom_mask(custom_mask, qo_indptr, kv_lens):
    """FlashInfer's segment_packbits: per request, qo_len*kv_len bools -> little-endian bytes.
    Returns (packed uint8, mask_indptr in bytes)."""
    m = np.asarray(custom_mask).reshape(-1).astype(bool)
    out, indptr, off = [], [0], 0
    for i in range(len(kv_lens)):
        n = int(qo_indptr[i + 1] - qo_indptr[i]) * int(kv_lens[i])
        if off + n > m.size:
            raise error(f"custom_mask: {m.size} entries, request {i} needs entries up to {off + n}")
        out.append(np.packbits(m[off:off + n], bitorder="little"))
        off += n
        indptr.append(indptr[-1] + out[-1].size)
    if off != m.size:
        raise error(f"custom_mask: {m.size} entries, the batch covers {off}")
    packed = np.concatenate(out) if out else np.zeros(0, np.uint8)
    return packed, np.asarray(indptr, np.int32)


def _mask_indptr_from_packed(qo_indptr, kv_lens):
    sizes = [(int(qo_indptr[i + 1] - qo_indptr[i]) * int(kv_lens[i]) + 7) // 8 for i in range(len(kv_lens))]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


class _PrefillBase:
    def __init__(self, float_workspace_buffer, kv_layout, ctx):
        if kv_layout not in ("NHD", "HND"):
            raise error(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
        self._ctx, ws = _workspace_context(float_workspace_buffer, ctx)
        self._ws = _Workspace(self._ctx, ws)
        self._kv_layout = kv_layout
        self._plan = None

    @property
    def context(self):
        """The clattn.Context this wrapper runs on."""
        return self._ctx

    def _mask(self, custom_mask, packed_custom_mask, qo_h, kv_lens):
        if custom_mask is None and packed_custom_mask is None:
            return None, None
        if packed_custom_mask is not None:
            packed = packed_custom_mask
            if not hasattr(packed, "shape") or isinstance(packed, np.ndarray):
                packed = np.ascontiguousarray(np.asarray(packed, dtype=np.uint8))
            mask_indptr = _mask_indptr_from_packed(qo_h, kv_lens)
        else:
            packed, mask_indptr = _pack_custom_mask(custom_mask, qo_h, kv_lens)
        t = as_tensor(self._ctx, packed if np.size(packed) else np.zeros(1, np.uint8), "packed_custom_mask", "u8")
        return t, mask_indptr

    def _outputs(self, q, out, lse, return_lse, d):
        ctx = self._ctx
        T = d["num_tokens"]
        oshape = (T, d["num_qo_heads"], d["head_dim"])
        if out is None:
            out = ctx.empty(oshape, d["o_dtype"])
        else:
            out = check(_arg(ctx, out, "out", oshape, d["o_dtype"]), "out", (d["o_dtype"],), oshape)
        if lse is None and return_lse:
            lse = ctx.empty(oshape[:2], "f32")
        elif lse is not None:
            lse = check(_arg(ctx, lse, "lse", oshape[:2], "f32"), "lse", ("f32",), oshape[:2])
        return out, lse

    def end_forward(self):
        """No-op (FlashInfer compatibility)."""


class BatchPrefillWithPagedKVCacheWrapper(_PrefillBase):
    r"""Wrapper class for prefill/append attention with paged kv-cache for batch of
    requests, shaped like ``flashinfer.BatchPrefillWithPagedKVCacheWrapper``.

    Each request's query rows (ragged, ``qo_indptr``) attend to the request's whole paged
    KV (cached prefix plus the new tokens, already appended); with ``causal=True`` query
    row ``j`` of request ``i`` sits at position ``kv_len_i - qo_len_i + j`` (the mask is
    aligned to the end, as in FlashInfer).

    Example
    -------
    >>> wrapper = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, "NHD")
    >>> wrapper.plan(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
    ...              num_qo_heads, num_kv_heads, head_dim, page_size, causal=True,
    ...              q_data_type="float16")
    >>> o = wrapper.run(q, (k_cache, v_cache))     # q [qo_indptr[-1], Hq, D]
    """

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False,
                 qo_indptr_buf=None, paged_kv_indptr_buf=None, paged_kv_indices_buf=None,
                 paged_kv_last_page_len_buf=None, custom_mask_buf=None, mask_indptr_buf=None,
                 backend="auto", *, ctx=None):
        r"""Constructor of :class:`BatchPrefillWithPagedKVCacheWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            A device tensor (its context is used), a Context, or None (default context).
            Only the nv_wgmma TMA variant needs one (256 bytes); the wrapper grows its own
            when this one is missing or too small.
        kv_layout : str
            ``"NHD"`` or ``"HND"``.
        use_cuda_graph, *_buf, backend :
            Accepted for FlashInfer compatibility and ignored.
        """
        super().__init__(float_workspace_buffer, kv_layout, ctx)

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None,
             causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             o_data_type=None, non_blocking=True, validate=True):
        r"""Plan batch prefill/append attention on Paged KV-Cache for given problem specification.

        Parameters
        ----------
        qo_indptr : array of int32, shape ``[batch_size + 1]``
            The indptr of the query/output tensor.
        paged_kv_indptr : array of int32, shape ``[batch_size + 1]``
            The indptr of the paged kv-cache.
        paged_kv_indices : array of int32, shape ``[qo_indptr[-1]]``
            The page indices of the paged kv-cache.
        paged_kv_last_page_len : array of int32, shape ``[batch_size]``
            The number of entries in the last page of each request in the paged kv-cache.
        num_qo_heads : int
            The number of query/output heads.
        num_kv_heads : int
            The number of key/value heads (group ``num_qo_heads / num_kv_heads`` up to 16).
        head_dim_qk : int
            The dimension of the heads on query/key tensor.
        page_size : int
            The size of each page in the paged kv-cache.
        head_dim_vo : Optional[int]
            Must equal ``head_dim_qk`` (or be None).
        custom_mask : Optional[array of bool]
            The flattened boolean mask, ``sum(qo_len[i] * kv_len[i])`` entries; True =
            the query row may attend to the key. Packed on the host like
            ``flashinfer.segment_packbits`` (little-endian bits).
        packed_custom_mask : Optional[array of uint8]
            The mask already bit-packed per request (takes precedence over custom_mask).
        causal : bool
            Whether to apply causal mask (ANDed with a custom mask when both are given).
        pos_encoding_mode : str
            Only ``"NONE"``.
        use_fp16_qk_reduction : bool
            Ignored (arithmetic is f32).
        sm_scale : Optional[float]
            Default ``1 / sqrt(head_dim)``.
        window_left : int
            Sliding window: a query at position ``p`` sees keys ``>= p - window_left``.
        logits_soft_cap : Optional[float]
            Soft cap (``cap * tanh(s / cap)``) when > 0.
        q_data_type, kv_data_type, o_data_type :
            dtypes of q, the cache and the output (kv and o default to q's).
        validate : bool
            Run the O(pages) metadata validation.
        """
        _check_pos_encoding(pos_encoding_mode)
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise error("head_dim_vo != head_dim_qk is not supported", "Unsupported")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        qo_h = host_i32(qo_indptr, "qo_indptr")
        indptr_h = host_i32(paged_kv_indptr, "paged_kv_indptr")
        indices_h = host_i32(paged_kv_indices, "paged_kv_indices")
        last_h = host_i32(paged_kv_last_page_len, "paged_kv_last_page_len")
        if len(indptr_h) != len(last_h) + 1 or len(qo_h) != len(last_h) + 1:
            raise error(f"qo_indptr ({len(qo_h)}), paged_kv_indptr ({len(indptr_h)}) and "
                        f"paged_kv_last_page_len ({len(last_h)}) disagree on the batch size")
        npg = np.diff(indptr_h)
        kv_lens = np.where(npg > 0, (npg - 1) * int(page_size) + last_h, 0)
        mask, mask_indptr = self._mask(custom_mask, packed_custom_mask, qo_h, kv_lens)
        num_pages = int(indices_h.max()) + 1 if indices_h.size else 1
        self._plan = _clattn._extend_plan(self._ctx, qo_h, indptr_h, indices_h, last_h, int(page_size), num_pages,
                                          int(num_kv_heads), int(head_dim_qk), self._kv_layout, kv_dt,
                                          int(num_qo_heads), q_dt, o_dt, _scale_or_zero(sm_scale),
                                          _scale_or_zero(logits_soft_cap), int(window_left), bool(causal),
                                          mask_indptr, bool(validate))
        self._indices = self._ctx.to_device(indices_h if indices_h.size else np.zeros(1, np.int32), "i32")
        self._mask_t = mask
        self._dims = dict(num_tokens=int(qo_h[-1]), num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim=int(head_dim_qk), page_size=int(page_size), num_pages=num_pages,
                          q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, k_scale=None, v_scale=None, out=None, lse=None, return_lse=False,
            sinks=None, enable_pdl=None):
        r"""Compute batch prefill/append attention between query and paged kv-cache.

        Parameters
        ----------
        q : Tensor-like, shape ``[qo_indptr[-1], num_qo_heads, head_dim_qk]``
            The query tensor.
        paged_kv_cache : Tuple[Tensor-like, Tensor-like]
            ``(k_cache, v_cache)`` in the wrapper's layout.
        k_scale, v_scale : Optional[float]
            fp8 dequantisation scales.
        out, lse : Optional[Tensor]
            Output buffers (allocated when None).
        return_lse : bool
            Whether to return the logsumexp of attention output (natural log).
        sinks : Optional[Tensor-like] ``[num_qo_heads]`` float32
            Attention-sink logits.

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` ``[qo_indptr[-1], num_qo_heads, head_dim]`` and, with return_lse, lse.
        """
        if self._plan is None:
            raise error("run() before plan()")
        d, ctx = self._dims, self._ctx
        k_cache, v_cache = _split_kv_cache(paged_kv_cache)
        qshape = (d["num_tokens"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        k_cache = _cache_arg(ctx, k_cache, "k_cache", self._kv_layout, d)
        v_cache = _cache_arg(ctx, v_cache, "v_cache", self._kv_layout, d)
        _check_cache(k_cache, v_cache, self._kv_layout, d)
        out, lse = self._outputs(q, out, lse, return_lse, d)
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        _clattn._extend_run(ctx, self._plan, q, k_cache, v_cache, self._indices, out, lse, sinks, self._mask_t,
                            1.0 if k_scale is None else float(k_scale), 1.0 if v_scale is None else float(v_scale),
                            self._ws.get(self._plan.workspace_bytes))
        return (out, lse) if return_lse else out

    forward = run


class BatchPrefillWithRaggedKVCacheWrapper(_PrefillBase):
    r"""Wrapper class for prefill/append attention with ragged (tensor) kv-cache for batch
    of requests, shaped like ``flashinfer.BatchPrefillWithRaggedKVCacheWrapper``.

    K and V are contiguous ``[kv_indptr[-1], num_kv_heads, head_dim]`` tensors split into
    requests by ``kv_indptr`` (over tokens); queries by ``qo_indptr``.

    Example
    -------
    >>> wrapper = clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx, "NHD")
    >>> wrapper.plan(qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim, causal=True,
    ...              q_data_type="float16")
    >>> o = wrapper.run(q, k, v)
    """

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend="auto", *, ctx=None):
        r"""Constructor of :class:`BatchPrefillWithRaggedKVCacheWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            A device tensor (its context is used), a Context, or None (default context).
        kv_layout : str
            Only ``"NHD"`` ([tokens, heads, dim]) for ragged K/V.
        use_cuda_graph, *_buf, backend :
            Accepted for FlashInfer compatibility and ignored.
        """
        if kv_layout != "NHD":
            raise error("ragged K/V must be NHD ([tokens, heads, dim])", "Unsupported")
        super().__init__(float_workspace_buffer, kv_layout, ctx)

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
             use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
             rope_theta=None, q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True,
             validate=True):
        r"""Plan batch prefill/append attention on Ragged KV-Cache for given problem specification.

        Parameters
        ----------
        qo_indptr : array of int32, shape ``[batch_size + 1]``
            The indptr of the query/output tensor.
        kv_indptr : array of int32, shape ``[batch_size + 1]``
            The indptr of the key/value tensor (tokens).
        num_qo_heads, num_kv_heads, head_dim_qk : int
            Heads and head dimension (``head_dim_vo`` must match or be None).
        custom_mask, packed_custom_mask :
            As in :meth:`BatchPrefillWithPagedKVCacheWrapper.plan`.
        causal : bool
            Causal mask aligned to the end of each request's keys.
        window_left, logits_soft_cap, sm_scale :
            As for the paged wrapper.
        q_data_type, kv_data_type, o_data_type :
            dtypes (kv and o default to q's).
        """
        _check_pos_encoding(pos_encoding_mode)
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise error("head_dim_vo != head_dim_qk is not supported", "Unsupported")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        qo_h = host_i32(qo_indptr, "qo_indptr")
        kv_h = host_i32(kv_indptr, "kv_indptr")
        if len(qo_h) != len(kv_h):
            raise error(f"qo_indptr ({len(qo_h)}) and kv_indptr ({len(kv_h)}) disagree on the batch size")
        mask, mask_indptr = self._mask(custom_mask, packed_custom_mask, qo_h, np.diff(kv_h))
        kv_tokens = int(kv_h[-1]) if kv_h.size else 0
        self._plan = _clattn._prefill_plan(self._ctx, qo_h, kv_h, kv_tokens, int(num_kv_heads), int(head_dim_qk),
                                           kv_dt, int(num_qo_heads), q_dt, o_dt, _scale_or_zero(sm_scale),
                                           _scale_or_zero(logits_soft_cap), int(window_left), bool(causal),
                                           mask_indptr, bool(validate))
        self._mask_t = mask
        self._dims = dict(num_tokens=int(qo_h[-1]), kv_tokens=kv_tokens, num_qo_heads=int(num_qo_heads),
                          num_kv_heads=int(num_kv_heads), head_dim=int(head_dim_qk), q_dtype=q_dt, kv_dtype=kv_dt,
                          o_dtype=o_dt)

    begin_forward = plan

    def run(self, q, k, v, *args, k_scale=None, v_scale=None, out=None, lse=None, return_lse=False, sinks=None,
            enable_pdl=None):
        r"""Compute batch prefill/append attention between query and kv-cache stored as ragged tensor.

        Parameters
        ----------
        q : Tensor-like, shape ``[qo_indptr[-1], num_qo_heads, head_dim_qk]``
        k : Tensor-like, shape ``[kv_indptr[-1], num_kv_heads, head_dim_qk]``
        v : Tensor-like, shape ``[kv_indptr[-1], num_kv_heads, head_dim_vo]``
        k_scale, v_scale, out, lse, return_lse, sinks :
            As in :meth:`BatchPrefillWithPagedKVCacheWrapper.run`.

        Returns
        -------
        Tensor or (Tensor, Tensor)
        """
        if self._plan is None:
            raise error("run() before plan()")
        d, ctx = self._dims, self._ctx
        qshape = (d["num_tokens"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        shp = (d["kv_tokens"], d["num_kv_heads"], d["head_dim"])
        k = check(_arg(ctx, k, "k", shp, d["kv_dtype"]), "k", (d["kv_dtype"],), shp)
        v = check(_arg(ctx, v, "v", shp, d["kv_dtype"]), "v", (d["kv_dtype"],), shp)
        out, lse = self._outputs(q, out, lse, return_lse, d)
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        _clattn._extend_run(ctx, self._plan, q, k, v, None, out, lse, sinks, self._mask_t,
                            1.0 if k_scale is None else float(k_scale), 1.0 if v_scale is None else float(v_scale),
                            self._ws.get(self._plan.workspace_bytes))
        return (out, lse) if return_lse else out

    forward = run


# ------------------------------------------------------------------------------ merge
def merge_state(v_a, s_a, v_b, s_b, *, out=None, s_out=None, ctx=None):
    r"""Merge the attention output ``V`` and the logsumexp value ``S`` from the two KV-segments.

    Parameters
    ----------
    v_a : Tensor-like, shape ``[seq_len, num_heads, head_dim]`` (f32, f16 or bf16)
        The attention output from the KV segment ``A``.
    s_a : Tensor-like, shape ``[seq_len, num_heads]`` float32
        The logsumexp value from segment ``A`` (natural log; FlashInfer uses log2).
    v_b, s_b :
        The same for segment ``B``.
    out, s_out : Optional[Tensor]
        Output buffers (allocated when None); ``out`` may be ``v_a`` (in place).

    Returns
    -------
    V : Tensor, shape ``[seq_len, num_heads, head_dim]``
        The merged attention output (equivalent to attention with merged KV-segment ``[A: B]``).
    S : Tensor, shape ``[seq_len, num_heads]``
        The logsumexp value from the merged KV-segment ``[A: B]``.
    """
    c = context_of(v_a, s_a, v_b, s_b, ctx=ctx)
    va = as_tensor(c, v_a, "v_a")
    check(va, "v_a", _FLOAT_IO)
    if len(va.shape) != 3:
        raise error(f"v_a: shape {list(va.shape)}, expected [seq_len, num_heads, head_dim]")
    sa = check(as_tensor(c, s_a, "s_a"), "s_a", ("f32",), va.shape[:2])
    vb = check(as_tensor(c, v_b, "v_b", va.dtype if _is_bits(v_b, va.dtype) else None), "v_b", (va.dtype,), va.shape)
    sb = check(as_tensor(c, s_b, "s_b"), "s_b", ("f32",), va.shape[:2])
    out = c.empty(va.shape, va.dtype) if out is None else check(as_tensor(c, out, "out"), "out", (va.dtype,), va.shape)
    s_out = c.empty(va.shape[:2], "f32") if s_out is None else check(as_tensor(c, s_out, "s_out"), "s_out", ("f32",), va.shape[:2])
    _clattn._merge_state(c, va, sa, vb, sb, out, s_out)
    return out, s_out


def merge_state_in_place(v, s, v_other, s_other, mask=None, *, ctx=None):
    r"""Merge the self-attention state ``(v, s)`` with another state ``(v_other, s_other)``
    in-place: ``v`` and ``s`` (clattn Tensors or zero-copy device buffers) are overwritten.

    Parameters
    ----------
    v : Tensor, shape ``[seq_len, num_heads, head_dim]``
    s : Tensor, shape ``[seq_len, num_heads]`` float32
    v_other, s_other :
        The other state.
    mask : None
        FlashInfer's per-row mask is not supported (must be None).
    """
    if mask is not None:
        raise error("merge_state_in_place: mask is not supported", "Unsupported")
    c = context_of(v, s, v_other, s_other, ctx=ctx)
    vt, st = as_tensor(c, v, "v"), as_tensor(c, s, "s")
    merge_state(vt, st, v_other, s_other, out=vt, s_out=st, ctx=c)


def merge_states(v, s, *, out=None, s_out=None, ctx=None):
    r"""Merge multiple attention states (v, s).

    Parameters
    ----------
    v : Tensor-like, shape ``[seq_len, num_states, num_heads, head_dim]``
        The attention output from the KV segments.
    s : Tensor-like, shape ``[seq_len, num_states, num_heads]`` float32
        The logsumexp value from the KV segments (natural log).

    Returns
    -------
    V : Tensor, shape ``[seq_len, num_heads, head_dim]``
        The merged attention output.
    S : Tensor, shape ``[seq_len, num_heads]``
        The logsumexp value from the merged KV-segments. States are combined in index
        order (deterministic).
    """
    c = context_of(v, s, ctx=ctx)
    vt = check(as_tensor(c, v, "v"), "v", _FLOAT_IO)
    if len(vt.shape) != 4:
        raise error(f"v: shape {list(vt.shape)}, expected [seq_len, num_states, num_heads, head_dim]")
    T, N, H, D = vt.shape
    st = check(as_tensor(c, s, "s"), "s", ("f32",), (T, N, H))
    out = c.empty((T, H, D), vt.dtype) if out is None else check(as_tensor(c, out, "out"), "out", (vt.dtype,), (T, H, D))
    s_out = c.empty((T, H), "f32") if s_out is None else check(as_tensor(c, s_out, "s_out"), "s_out", ("f32",), (T, H))
    _clattn._merge_states(c, vt, st, out, s_out)
    return out, s_out


# ------------------------------------------------------------------------------ append
def append_kv(k, v, slot_mapping, k_cache, v_cache, kv_layout="NHD", k_scale=None, v_scale=None,
              validate=True, *, dtype=None, ctx=None):
    r"""Writes new K/V rows into the paged cache at ``slot_mapping`` (vLLM's
    ``reshape_and_cache`` / SGLang's ``set_kv_buffer``).

    Parameters
    ----------
    k, v : Tensor-like, shape ``[num_tokens, num_kv_heads, head_dim]`` (f32, f16, bf16)
    slot_mapping : Tensor-like int32/int64 ``[num_tokens]``
        Slot ``s`` goes to page ``s // page_size``, offset ``s % page_size``; negative
        slots are skipped (padding).
    k_cache, v_cache : Tensor
        The paged cache (``kv_layout``); fp8 caches store ``round(value / scale)``.
    k_scale, v_scale : Optional[float]
        Quantisation scales (default 1).
    validate : bool
        Check every slot against the cache size on the host first (copies slot_mapping
        back when it lives on the device).
    dtype : optional
        dtype of k/v when they are uint16 bf16 bit patterns (``"bf16"``).
    """
    c = context_of(k, v, k_cache, v_cache, ctx=ctx)
    kt = as_tensor(c, k, "append_key", dtype)
    vt = as_tensor(c, v, "append_value", dtype or kt.dtype)
    sl = as_tensor(c, slot_mapping, "slot_mapping")
    host = host_i32(slot_mapping, "slot_mapping") if validate else None
    kc = as_tensor(c, k_cache, "k_cache")
    vc = as_tensor(c, v_cache, "v_cache")
    _clattn._append_kv(c, kt, vt, sl, kc, vc, kv_layout, 1.0 if k_scale is None else float(k_scale),
                       1.0 if v_scale is None else float(v_scale), host)


def get_batch_indices_positions(append_indptr, seq_lens, nnz):
    r"""FlashInfer's helper: per appended token, its request index and position.

    Parameters
    ----------
    append_indptr : array int32 ``[batch_size + 1]`` (token offsets of the new rows)
    seq_lens : array int32 ``[batch_size]`` (KV length after the append)
    nnz : int (number of appended tokens)

    Returns
    -------
    (batch_indices, positions) : numpy int32 arrays of ``nnz`` entries.
    """
    ip = host_i32(append_indptr, "append_indptr")
    sl = host_i32(seq_lens, "seq_lens")
    bi = np.zeros(nnz, np.int32)
    pos = np.zeros(nnz, np.int32)
    for i in range(len(sl)):
        a, b = int(ip[i]), int(ip[i + 1])
        bi[a:b] = i
        pos[a:b] = np.arange(sl[i] - (b - a), sl[i], dtype=np.int32)
    return bi, pos


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices,
                          kv_indptr, kv_last_page_len, kv_layout="NHD", *, dtype=None, ctx=None):
    r"""Append a batch of key-value pairs to a paged key-value cache (FlashInfer signature).

    Parameters
    ----------
    append_key : Tensor-like, shape ``[append_indptr[-1], num_kv_heads, head_dim]``
    append_value : Tensor-like, same shape
    batch_indices : array int32 ``[append_indptr[-1]]``
        The request index of each appended token.
    positions : array int32 ``[append_indptr[-1]]``
        The position of each appended token in its request.
    paged_kv_cache : Tuple[Tensor, Tensor]
        ``(k_cache, v_cache)``.
    kv_indices, kv_indptr, kv_last_page_len :
        The paged-KV CSR of the batch after the append.
    kv_layout : str
        ``"NHD"`` or ``"HND"``.

    Note
    ----
    The slot of every token is computed on the host from the CSR (device arrays are
    copied back), then :func:`append_kv` writes the rows.
    """
    k_cache, v_cache = _split_kv_cache(paged_kv_cache)
    c = context_of(append_key, append_value, k_cache, v_cache, ctx=ctx)
    kc = as_tensor(c, k_cache, "k_cache")
    _, page_size, _, _ = _cache_dims(kc, kv_layout)
    bi = host_i32(batch_indices, "batch_indices")
    pos = host_i32(positions, "positions")
    ind = host_i32(kv_indices, "kv_indices")
    ip = host_i32(kv_indptr, "kv_indptr")
    if bi.size != pos.size:
        raise error(f"batch_indices ({bi.size}) and positions ({pos.size}) differ in length")
    if bi.size and (bi.min() < 0 or bi.max() >= len(ip) - 1):
        raise error("batch_indices: request index out of range")
    page_in_req = pos // page_size
    npages = (ip[1:] - ip[:-1])[bi] if bi.size else np.zeros(0, np.int32)
    bad = np.nonzero((pos < 0) | (page_in_req >= npages))[0]
    if bad.size:
        i = int(bad[0])
        raise error(f"positions[{i}] = {int(pos[i])} is outside request {int(bi[i])}'s pages")
    slots = ind[ip[bi] + page_in_req].astype(np.int64) * page_size + pos % page_size
    append_kv(append_key, append_value, slots, kc, v_cache, kv_layout, dtype=dtype, ctx=c)
