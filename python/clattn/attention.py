"""FlashInfer-shaped attention wrappers: paged decode, paged and ragged prefill, KV append,
merge_state(s). Semantics follow FlashInfer where the contract matches; differences are
listed in docs/python.md and in each docstring."""
import numpy as np

from . import _clattn
from ._util import (LOG2E, Writeback, as_tensor, check, context_of, dtype_name, error, host_i32, is_raw_buffer,
                    natural_lse, rescale_lse, result, _ITEMSIZE)
from ._kv_quant import (QUANT_KV, cache_storage, is_quantised, kv_scales, quant_group_of, scale_cache_shape,
                        scale_caches)

_FLOAT_IO = ("f32", "f16", "bf16")


def _check_pos_encoding(mode):
    if mode not in (None, "NONE"):
        raise error(f"pos_encoding_mode={mode!r}: clattn applies no RoPE inside attention; "
                    "apply it to q/k before the call (clattn.apply_rope_pos_ids, or "
                    "rope_append_paged_kv_cache with the append) and pass 'NONE'", "Unsupported")


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


class _Wrapper:
    """What the MLA and sparse wrappers keep: their context, their workspace and the active plan."""

    def _init_wrapper(self, float_workspace_buffer, ctx):
        self._ctx, ws = _workspace_context(float_workspace_buffer, ctx)
        self._ws = _Workspace(self._ctx, ws)
        self._plan = None

    @property
    def context(self):
        """The clattn.Context this wrapper runs on."""
        return self._ctx

    @property
    def plan_info(self):
        """The active plan (its read-only attributes: sizes, workspace_bytes, variants, ...)."""
        if self._plan is None:
            raise error("plan_info before plan()")
        return self._plan


def _metadata(kv_indptr, kv_indices, third, third_name, block_tables, seq_lens):
    """Host metadata of a plan: (indptr, indices, third, table_flat, seq_lens, batch, max_pages,
    used page ids) from the CSR (third = kv_last_page_len or kv_len_arr) or block_tables."""
    if block_tables is not None:
        if kv_indptr is not None or kv_indices is not None or third is not None:
            raise error(f"block_tables given with kv_indptr/kv_indices/{third_name}: pass one metadata form")
        if seq_lens is None:
            raise error("block_tables needs seq_lens")
        bt = np.asarray(block_tables)
        if bt.ndim != 2:
            raise error(f"block_tables: shape {list(bt.shape)}, expected [batch_size, max_pages]")
        ids = host_i32(bt, "block_tables")
        sl = host_i32(seq_lens, "seq_lens")
        return None, None, None, ids, sl, len(sl), int(bt.shape[1]), ids[ids >= 0]
    if seq_lens is not None:
        raise error("seq_lens belongs to the block_tables form")
    if kv_indptr is None or kv_indices is None or third is None:
        raise error(f"kv_indptr, kv_indices and {third_name} are required (or block_tables with seq_lens)")
    ip = host_i32(kv_indptr, "kv_indptr")
    ind = host_i32(kv_indices, "kv_indices")
    th = host_i32(third, third_name)
    if len(ip) != len(th) + 1:
        raise error(f"kv_indptr ({len(ip)}) and {third_name} ({len(th)}) disagree on the batch size")
    return ip, ind, th, None, None, len(th), 0, ind


def _num_pages(used, num_pages):
    least = int(used.max()) + 1 if used.size else 1
    return int(num_pages) if num_pages is not None else least


class _Planned:
    """Plan bookkeeping shared by the attention wrappers. FlashInfer's ``forward`` (and
    ``run(window_left=...)``) set sm_scale, the soft cap, the window and causality at call
    time; clattn bakes them into the plan, so a call with other values plans again from the
    last ``plan()`` call's metadata, once per distinct set of values (kept, a few at most)."""

    _MAX_PLANS = 8

    def _set_plan(self, make, opts):
        self._make, self._plans, self._opts = make, {}, None
        self._activate(opts)

    def _activate(self, opts):
        key = tuple(sorted(opts.items()))
        if key not in self._plans:
            if len(self._plans) >= self._MAX_PLANS:
                self._plans.clear()
            self._plans[key] = self._make(opts)
        self._plan, self._opts = self._plans[key], dict(opts)

    def _use(self, **changes):
        """Makes the plan for the planned options with `changes` applied the active one."""
        if self._plan is None:
            raise error("run() before plan()")
        opts = dict(self._opts, **changes)
        if opts != self._opts:
            self._activate(opts)

    def _kv_side(self, ctx, k_scale, v_scale, k_scale_cache, v_scale_cache, num_pages):
        """A paged run's scales: (k_scale, v_scale, k_head_scales, v_head_scales, k_scale_cache,
        v_scale_cache), checked against the plan (a scale cache of the other scale dtype plans
        again)."""
        d = self._dims
        ks, vs, kh, vh = kv_scales(ctx, k_scale, v_scale, d["num_kv_heads"], d["kv_dtype"])
        groups = d["head_dim"] // d["quant_group"] if d["quant_group"] else 0
        ksc, vsc = scale_caches(ctx, d["kv_dtype"], k_scale_cache, v_scale_cache, self._kv_layout, num_pages,
                                d["page_size"], d["num_kv_heads"], self._opts["scale_dtype"], groups=groups)
        if ksc is not None:
            self._use(scale_dtype=ksc.dtype)
        return ks, vs, kh, vh, ksc, vsc


def _opt_scale(sm_scale):
    return 0.0 if sm_scale is None else float(sm_scale)  # 0: the library's 1 / sqrt(head_dim)


def _opt_cap(cap):
    return 0.0 if cap is None else float(cap)


def _unsupported_if(cond, what):
    if cond:
        raise error(f"{what} is not supported by clattn (see docs/python.md)", "Unsupported")


class BatchDecodeWithPagedKVCacheWrapper(_Planned):
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
    context (``.numpy()`` or ``np.asarray`` copies to the host).
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
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False,
             q_len_per_req=1, *, window_right=0, deterministic=False, max_splits=0, validate=True,
             kv_scale_data_type="float32", quant_group=None):
        r"""Plan batch decode for given problem specification.

        Positional order as FlashInfer's (after ``page_size``: pos_encoding_mode,
        window_left, logits_soft_cap, q_data_type, kv_data_type, o_data_type, data_type,
        sm_scale, rope_scale, rope_theta, non_blocking, block_tables, seq_lens,
        fixed_split_size, disable_split_kv, q_len_per_req); clattn's own options are
        keyword-only.

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
            KV cache dtype: float32, float16, bfloat16, fp8_e4m3, fp8_e5m2, int8 or int4
            (default: q's). int8 and int4 caches come with scale caches (``run``'s
            ``k_scale_cache`` / ``v_scale_cache``; docs/kv_formats.md); int4 caches are uint8
            tensors of nibble pairs, ``[..., head_dim // 2]``.
        o_data_type : optional
            Output dtype (default: ``q_data_type``).
        data_type : optional
            Legacy alias of ``kv_data_type`` (FlashInfer).
        sm_scale : Optional[float]
            The scale used in softmax, default ``1 / sqrt(head_dim)``.
        rope_scale, rope_theta, non_blocking, seq_lens, fixed_split_size :
            Accepted for compatibility and ignored (``seq_lens`` and ``fixed_split_size``
            are hints of other FlashInfer backends; clattn's planner picks the split).
        block_tables : None
            The page-table metadata form is not supported here (must be None).
        disable_split_kv : bool
            True: never split a request's KV (as ``max_splits=1``).
        q_len_per_req : int
            Only 1 (one query token per request).
        window_right : int
            Keyword; no effect in decode (no key lies right of the query).
        deterministic : bool
            Fixed split tiles: a request's output bits do not depend on its batch mates.
        max_splits : int
            KV chunks per request (0 = planner's choice, 1 = never split).
        validate : bool
            Run the O(pages) metadata validation (page ids in range, ...).
        kv_scale_data_type : str
            Keyword; int8 / int4 caches: the scale caches' dtype, float32 (default) or
            float16 (a ``run`` with the other dtype plans again).
        quant_group : Optional[int]
            Keyword; int4 caches: head-dim elements per [scale, zero] pair, 32, 64 (default)
            or 128, dividing head_dim. Not with other dtypes.

        Note
        ----
        The metadata is read on the host (device arrays are copied back once); the page
        indices are uploaded to a device copy the ``run`` calls read.
        """
        _check_pos_encoding(pos_encoding_mode)
        _unsupported_if(block_tables is not None, "block_tables (page-table decode metadata)")
        _unsupported_if(q_len_per_req not in (None, 1), f"q_len_per_req={q_len_per_req}")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type if kv_data_type is not None else data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        sc_dt = dtype_name(kv_scale_data_type, "kv_scale_data_type")
        group = quant_group_of(kv_dt, quant_group, int(head_dim))
        indptr_h = host_i32(indptr, "indptr")
        indices_h = host_i32(indices, "indices")
        last_h = host_i32(last_page_len, "last_page_len")
        num_pages = int(indices_h.max()) + 1 if indices_h.size else 1
        splits = 1 if disable_split_kv else int(max_splits)

        def make(o):
            return _clattn._decode_plan(self._ctx, indptr_h, indices_h, last_h, int(page_size), max(num_pages, 1),
                                        int(num_kv_heads), int(head_dim), self._kv_layout, kv_dt, int(num_qo_heads),
                                        q_dt, o_dt, o["sm_scale"], o["cap"], o["window_left"], bool(deterministic),
                                        splits, bool(validate), o["scale_dtype"], group)

        self._set_plan(make, dict(sm_scale=_opt_scale(sm_scale), cap=_opt_cap(logits_soft_cap),
                                  window_left=int(window_left), scale_dtype=sc_dt))
        self._indices = self._ctx.to_device(indices_h if indices_h.size else np.zeros(1, np.int32), "i32")
        self._dims = dict(batch_size=len(last_h), num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim=int(head_dim), page_size=int(page_size), num_pages=num_pages,
                          q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt, quant_group=group)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None, return_lse_base_on_e=False,
            k_scale_cache=None, v_scale_cache=None):
        r"""Compute batch decode attention between query and paged kv cache.

        Parameters
        ----------
        q : Tensor-like, shape ``[batch_size, num_qo_heads, head_dim]``
            The query tensor (clattn.Tensor, pyopencl Array, DLPack tensor or numpy array).
        paged_kv_cache : Tuple[Tensor-like, Tensor-like]
            ``(k_cache, v_cache)``, each ``[max_num_pages, page_size, num_kv_heads,
            head_dim]`` (NHD) or ``[max_num_pages, num_kv_heads, page_size, head_dim]``
            (HND); with ``page_size == 1`` also 3-D ``[max_num_pages, num_kv_heads,
            head_dim]`` (FlashInfer's page-size-1 form, either layout). int4: uint8, the last
            dim ``head_dim // 2``.
        q_scale : Optional[float]
            Only None or 1.0 (fold a query scale into ``sm_scale`` at plan time instead).
        k_scale, v_scale : Optional[float | Tensor-like]
            Dequantisation scales of a float (fp8) cache, loaded = stored * scale: a number
            or a one-element array/tensor, or ``[num_kv_heads]`` values (per-KV-head
            scales, vLLM's / FlashInfer's form; f32 tensors stay on the device). Only None
            or 1 with an int8 or int4 cache.
        k_scale_cache, v_scale_cache : Optional[Tensor-like]
            int8 / int4 caches only (required there), as ``append_paged_kv_cache`` wrote
            them, float32 or float16, the same page count as the caches. int8: the scale of
            every (token, KV head) row, ``[max_num_pages, page_size, num_kv_heads]`` (NHD) or
            ``[max_num_pages, num_kv_heads, page_size]`` (HND); loaded = stored * scale.
            int4: those shapes plus ``[head_dim // quant_group, 2]``, a [scale, zero] pair
            per group; loaded = (nibble - zero) * scale.
        out : Optional[Tensor-like], shape ``[batch_size, num_qo_heads, head_dim]``
            Output buffer (allocated when None); a numpy array is written in place.
        lse : Optional[Tensor-like], shape ``[batch_size, num_qo_heads]`` float32
            Buffer for the log-sum-exp (allocated when None and return_lse).
        return_lse : bool
            Whether to return the logsumexp of attention scores.
        window_left : Optional[int]
            A window other than the planned one plans again (FlashInfer sets it per run).
        sinks : Optional[Tensor-like], ``[num_qo_heads]`` float32
            Attention-sink logits (gpt-oss).
        return_lse_base_on_e : bool
            clattn extension (FlashInfer's MLA wrapper has the same switch): False (default)
            = base-2 LSE as FlashInfer returns it, True = natural log.
        enable_pdl, q_len_per_req, skip_softmax_threshold_scale_factor, kv_cache_sf :
            Accepted (``q_len_per_req`` only None or 1; the others only None: no skipped
            softmax blocks, no nvfp4 scale factors).

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` ``[batch_size, num_qo_heads, head_dim]``, and the lse
            ``[batch_size, num_qo_heads]`` when ``return_lse``. A numpy ``out`` / ``lse``
            is returned as that array.
        """
        if self._plan is None:
            raise error("run() before plan()")
        _unsupported_if(q_scale not in (None, 1.0), "q_scale (scale q or sm_scale instead)")
        _unsupported_if(q_len_per_req not in (None, 1), f"q_len_per_req={q_len_per_req}")
        _unsupported_if(skip_softmax_threshold_scale_factor is not None, "skip_softmax_threshold_scale_factor")
        _unsupported_if(kv_cache_sf is not None, "kv_cache_sf (nvfp4 cache scale factors)")
        if window_left is not None:
            self._use(window_left=int(window_left))
        d = self._dims
        ctx = self._ctx
        k_cache, v_cache = _split_kv_cache(paged_kv_cache)
        qshape = (d["batch_size"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        k_cache = _cache_arg(ctx, k_cache, "k_cache", self._kv_layout, d)
        v_cache = _cache_arg(ctx, v_cache, "v_cache", self._kv_layout, d)
        n = _check_cache(k_cache, v_cache, self._kv_layout, d)
        ks, vs, kh, vh, ksc, vsc = self._kv_side(ctx, k_scale, v_scale, k_scale_cache, v_scale_cache, n)
        wb = Writeback()
        o_t, lse_t = _outputs(ctx, wb, out, lse, return_lse, qshape, d["o_dtype"])
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        ws = self._ws.get(self._plan.workspace_bytes)
        _clattn._decode_run(ctx, self._plan, q, k_cache, v_cache, self._indices, o_t, lse_t, ws, sinks, ks, vs, ksc, vsc,
                            kh, vh)
        if not return_lse_base_on_e:
            rescale_lse(ctx, lse_t, LOG2E)
        wb.done()
        o_r = result(out, o_t)
        return (o_r, result(lse, lse_t)) if return_lse else o_r

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        """:meth:`run` with ``return_lse=True`` (FlashInfer's ``run_return_lse``)."""
        return self.run(q, paged_kv_cache, *args, **dict(kwargs, return_lse=True))

    def forward(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None, v_scale=None,
                window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        r"""FlashInfer's older call form: runs with the given ``window_left``,
        ``logits_soft_cap`` and ``sm_scale`` (these, not the planned values, apply, as in
        FlashInfer; other values than the planned ones plan again). Returns ``o``."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(window_left=int(window_left), cap=_opt_cap(logits_soft_cap), sm_scale=_opt_scale(sm_scale))
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)

    def forward_return_lse(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None,
                           v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                           rope_theta=None):
        r""":meth:`forward` returning ``(o, lse)`` (base-2 LSE, as FlashInfer)."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(window_left=int(window_left), cap=_opt_cap(logits_soft_cap), sm_scale=_opt_scale(sm_scale))
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, return_lse=True)

    def end_forward(self):
        """No-op (FlashInfer compatibility)."""


def _outputs(ctx, wb, out, lse, return_lse, oshape, o_dtype):
    """The output and LSE tensors of a run: the caller's (checked; numpy ones tracked for
    write-back) or new ones. The LSE tensor is None when neither asked for nor given."""
    if out is None:
        o_t = ctx.empty(oshape, o_dtype)
    else:
        o_t = wb.track(out, "out", lambda: check(_arg(ctx, out, "out", oshape, o_dtype), "out", (o_dtype,), oshape))
    if lse is None:
        lse_t = ctx.empty(oshape[:2], "f32") if return_lse else None
    else:
        lse_t = wb.track(lse, "lse", lambda: check(_arg(ctx, lse, "lse", oshape[:2], "f32"), "lse", ("f32",),
                                                   oshape[:2]))
    return o_t, lse_t


def _arg(ctx, x, name, shape, dtype):
    """as_tensor where the wrapper knows the shape and dtype: raw Buffers / cl_mem ints are
    wrapped with them, uint16/uint8 arrays read as `dtype` bits, others keep their own."""
    if is_raw_buffer(x):
        return as_tensor(ctx, x, name, dtype, shape)
    return as_tensor(ctx, x, name, dtype if _is_bits(x, dtype) else None)


def _cache_arg(ctx, x, name, layout, d):
    """A paged cache argument; for a raw buffer the page count comes from its size."""
    dt, last = cache_storage(d["kv_dtype"], d["head_dim"])
    if is_raw_buffer(x):
        per_page = d["page_size"] * d["num_kv_heads"] * last * _ITEMSIZE[dt]
        n = ctx.wrap(x, (1,), "u8").buffer_bytes // per_page
        return as_tensor(ctx, x, name, dt, _cache_shape(layout, n, d["page_size"], d["num_kv_heads"], last))
    t = as_tensor(ctx, x, name, d["kv_dtype"] if _is_bits(x, d["kv_dtype"]) else None)
    if len(t.shape) == 3:  # FlashInfer's page-size-1 form [slots, heads, dim], either layout
        if d["page_size"] != 1:
            raise error(f"{name}: a 3-D cache {list(t.shape)} is the page-size-1 form; the plan's page_size is "
                        f"{d['page_size']}")
        t = t.view(_cache_shape(layout, t.shape[0], 1, t.shape[1], t.shape[2]))
    return t


def _is_bits(x, want):
    """True when x is a numpy/pyopencl array of raw bits (uint16/uint8) and the wrapper
    expects bf16/fp8, which numpy cannot name: the bits are then read as `want`."""
    dt = getattr(x, "dtype", None)
    if dt is None or isinstance(dt, str) or want not in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        return False
    return np.dtype(dt) in (np.dtype(np.uint16), np.dtype(np.uint8))


def _check_cache(k_cache, v_cache, layout, d):
    dt, last = cache_storage(d["kv_dtype"], d["head_dim"])
    if d["kv_dtype"] == "i4" and k_cache.dtype != "u8":
        raise error(f"k_cache: dtype {k_cache.dtype}; an int4 cache is uint8 bytes of two nibbles each "
                    f"([..., head_dim // 2 = {last}])")
    check(k_cache, "k_cache", (dt,))
    check(v_cache, "v_cache", (dt,), tuple(k_cache.shape))
    n, p, h, hd = _cache_dims(k_cache, layout)
    if (p, h, hd) != (d["page_size"], d["num_kv_heads"], last):
        want = _cache_shape(layout, None, d["page_size"], d["num_kv_heads"], last)
        raise error(f"k_cache: shape {list(k_cache.shape)}, expected "
                    f"[{', '.join('*' if w is None else str(w) for w in want)}] ({layout}"
                    f"{'; int4: head_dim // 2 bytes a row' if d['kv_dtype'] == 'i4' else ''})")
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


class _PrefillBase(_Planned):
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

    @staticmethod
    def _plan_opts(causal, window_left, logits_soft_cap, sm_scale):
        return dict(causal=bool(causal), window_left=int(window_left), cap=_opt_cap(logits_soft_cap),
                    sm_scale=_opt_scale(sm_scale))

    def _run(self, q, k, v, page_ids, scales, out, lse, return_lse, sinks, return_lse_base_on_e,
             q_scale=None, o_scale=None):
        """The common part of run(): outputs, sinks, the kernel, LSE base and write-back.
        scales: (k_scale, v_scale, k_head_scales, v_head_scales, k_scale_cache, v_scale_cache)."""
        _unsupported_if(q_scale not in (None, 1.0), "q_scale (scale q or sm_scale instead)")
        _unsupported_if(o_scale not in (None, 1.0), "o_scale (fp8 output)")
        ks, vs, kh, vh, ksc, vsc = scales
        d, ctx = self._dims, self._ctx
        oshape = (d["num_tokens"], d["num_qo_heads"], d["head_dim"])
        wb = Writeback()
        o_t, lse_t = _outputs(ctx, wb, out, lse, return_lse, oshape, d["o_dtype"])
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        _clattn._extend_run(ctx, self._plan, q, k, v, page_ids, o_t, lse_t, sinks, self._mask_t, ks, vs,
                            self._ws.get(self._plan.workspace_bytes), ksc, vsc, kh, vh)
        if not return_lse_base_on_e:
            rescale_lse(ctx, lse_t, LOG2E)
        wb.done()
        o_r = result(out, o_t)
        return (o_r, result(lse, lse_t)) if return_lse else o_r

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
             o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None,
             token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None,
             max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False,
             *, window_right=-1, validate=True, kv_scale_data_type="float32", quant_group=None):
        r"""Plan batch prefill/append attention on Paged KV-Cache for given problem specification.

        Positional order as FlashInfer's; clattn's own options are keyword-only.

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
            dtypes of q, the cache and the output (kv and o default to q's). The cache may be
            float32, float16, bfloat16, fp8_e4m3, fp8_e5m2, int8 or int4 (with scale caches:
            ``run``'s ``k_scale_cache`` / ``v_scale_cache``; docs/kv_formats.md), where the
            extend op reads that format.
        rope_scale, rope_theta, non_blocking, seq_lens, seq_lens_q, max_token_per_sequence,
        max_sequence_kv, fixed_split_size, disable_split_kv :
            Accepted for compatibility and ignored (hints of other FlashInfer backends).
        prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr, block_tables :
            Multi-item scoring and the page-table form are not supported (None / 0 only).
        window_right : int
            Keyword; only -1 (no right window; causal masking is ``causal``).
        validate : bool
            Keyword; run the O(pages) metadata validation.
        kv_scale_data_type : str
            Keyword; int8 / int4 caches: the scale caches' dtype, float32 (default) or float16.
        quant_group : Optional[int]
            Keyword; int4 caches: head-dim elements per [scale, zero] pair (32, 64 (default)
            or 128), as :meth:`BatchDecodeWithPagedKVCacheWrapper.plan`.
        """
        _check_pos_encoding(pos_encoding_mode)
        _check_prefill_extras(prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
                              window_right)
        _unsupported_if(block_tables is not None, "block_tables (page-table prefill metadata)")
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise error("head_dim_vo != head_dim_qk is not supported", "Unsupported")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        sc_dt = dtype_name(kv_scale_data_type, "kv_scale_data_type")
        group = quant_group_of(kv_dt, quant_group, int(head_dim_qk))
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

        def make(o):
            return _clattn._extend_plan(self._ctx, qo_h, indptr_h, indices_h, last_h, int(page_size), num_pages,
                                        int(num_kv_heads), int(head_dim_qk), self._kv_layout, kv_dt,
                                        int(num_qo_heads), q_dt, o_dt, o["sm_scale"], o["cap"], o["window_left"],
                                        o["causal"], mask_indptr, bool(validate), o["scale_dtype"], group)

        self._set_plan(make, dict(self._plan_opts(causal, window_left, logits_soft_cap, sm_scale), scale_dtype=sc_dt))
        self._indices = self._ctx.to_device(indices_h if indices_h.size else np.zeros(1, np.int32), "i32")
        self._mask_t = mask
        self._dims = dict(num_tokens=int(qo_h[-1]), num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim=int(head_dim_qk), page_size=int(page_size), num_pages=num_pages,
                          q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt, quant_group=group)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, kv_cache_sf=None,
            skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None,
            return_lse_base_on_e=False, k_scale_cache=None, v_scale_cache=None):
        r"""Compute batch prefill/append attention between query and paged kv-cache.

        Parameters
        ----------
        q : Tensor-like, shape ``[qo_indptr[-1], num_qo_heads, head_dim_qk]``
            The query tensor.
        paged_kv_cache : Tuple[Tensor-like, Tensor-like]
            ``(k_cache, v_cache)`` in the wrapper's layout (3-D ``[pages, heads, dim]``
            when ``page_size == 1``).
        q_scale : Optional[float]
            Only None or 1.0.
        k_scale, v_scale : Optional[float | Tensor-like]
            Dequantisation scales of a float (fp8) cache: a number, a one-element array, or
            ``[num_kv_heads]`` per-KV-head scales. Only None or 1 with an int8 or int4 cache.
        k_scale_cache, v_scale_cache : Optional[Tensor-like]
            int8 / int4 caches only (required there): the row scales or group pairs, as
            :meth:`BatchDecodeWithPagedKVCacheWrapper.run` takes them.
        out, lse : Optional[Tensor-like]
            Output buffers (allocated when None); numpy arrays are written in place.
        return_lse : bool
            Whether to return the logsumexp of attention output.
        window_left : Optional[int]
            A window other than the planned one plans again.
        sinks : Optional[Tensor-like] ``[num_qo_heads]`` float32
            Attention-sink logits.
        return_lse_base_on_e : bool
            clattn extension: False (default) = base-2 LSE as FlashInfer, True = natural log.
        enable_pdl, kv_cache_sf, skip_softmax_threshold_scale_factor, use_fp16_softmax, uses_spcompress :
            Accepted: None (or False) only.

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` ``[qo_indptr[-1], num_qo_heads, head_dim]`` and, with return_lse, lse.
        """
        if self._plan is None:
            raise error("run() before plan()")
        _unsupported_if(kv_cache_sf is not None, "kv_cache_sf (nvfp4 cache scale factors)")
        _unsupported_if(skip_softmax_threshold_scale_factor is not None, "skip_softmax_threshold_scale_factor")
        _unsupported_if(bool(use_fp16_softmax) or bool(uses_spcompress), "use_fp16_softmax / uses_spcompress")
        if window_left is not None:
            self._use(window_left=int(window_left))
        d, ctx = self._dims, self._ctx
        k_cache, v_cache = _split_kv_cache(paged_kv_cache)
        qshape = (d["num_tokens"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        k_cache = _cache_arg(ctx, k_cache, "k_cache", self._kv_layout, d)
        v_cache = _cache_arg(ctx, v_cache, "v_cache", self._kv_layout, d)
        n = _check_cache(k_cache, v_cache, self._kv_layout, d)
        scales = self._kv_side(ctx, k_scale, v_scale, k_scale_cache, v_scale_cache, n)
        return self._run(q, k_cache, v_cache, self._indices, scales, out, lse, return_lse, sinks,
                         return_lse_base_on_e, q_scale)

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        """:meth:`run` with ``return_lse=True`` (FlashInfer's ``run_return_lse``)."""
        return self.run(q, paged_kv_cache, *args, **dict(kwargs, return_lse=True))

    def forward(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                rope_theta=None):
        r"""FlashInfer's older call form: runs with the given ``causal``, ``window_left``,
        ``logits_soft_cap`` and ``sm_scale`` (these, not the planned values, apply, as in
        FlashInfer; other values than the planned ones plan again). Returns ``o``."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(**self._plan_opts(causal, window_left, logits_soft_cap, sm_scale))
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale)

    def forward_return_lse(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE",
                           use_fp16_qk_reduction=False, k_scale=None, v_scale=None, window_left=-1,
                           logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        r""":meth:`forward` returning ``(o, lse)`` (base-2 LSE, as FlashInfer)."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(**self._plan_opts(causal, window_left, logits_soft_cap, sm_scale))
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale, return_lse=True)


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
             prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None,
             fixed_split_size=None, disable_split_kv=False, seq_lens=None, seq_lens_q=None,
             max_token_per_sequence=None, max_sequence_kv=None, v_indptr=None, o_indptr=None, *, window_right=-1,
             validate=True):
        r"""Plan batch prefill/append attention on Ragged KV-Cache for given problem specification.

        Positional order as FlashInfer's; clattn's own options are keyword-only.

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
        rope_scale, rope_theta, non_blocking, fixed_split_size, disable_split_kv, seq_lens,
        seq_lens_q, max_token_per_sequence, max_sequence_kv :
            Accepted and ignored.
        prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
        v_indptr, o_indptr :
            Not supported (None / 0 only): V and O share ``kv_indptr`` / ``qo_indptr``.
        window_right, validate :
            Keyword-only, as for the paged wrapper.
        """
        _check_pos_encoding(pos_encoding_mode)
        _check_prefill_extras(prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
                              window_right)
        _unsupported_if(v_indptr is not None or o_indptr is not None, "v_indptr / o_indptr")
        if head_dim_vo is not None and head_dim_vo != head_dim_qk:
            raise error("head_dim_vo != head_dim_qk is not supported", "Unsupported")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        if is_quantised(kv_dt):
            raise error(f"kv_data_type={kv_data_type!r}: ragged K/V has no scale caches; {QUANT_KV[kv_dt][0]} is "
                        "a paged cache format (BatchPrefillWithPagedKVCacheWrapper)", "Unsupported")
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        qo_h = host_i32(qo_indptr, "qo_indptr")
        kv_h = host_i32(kv_indptr, "kv_indptr")
        if len(qo_h) != len(kv_h):
            raise error(f"qo_indptr ({len(qo_h)}) and kv_indptr ({len(kv_h)}) disagree on the batch size")
        mask, mask_indptr = self._mask(custom_mask, packed_custom_mask, qo_h, np.diff(kv_h))
        kv_tokens = int(kv_h[-1]) if kv_h.size else 0

        def make(o):
            return _clattn._prefill_plan(self._ctx, qo_h, kv_h, kv_tokens, int(num_kv_heads), int(head_dim_qk),
                                         kv_dt, int(num_qo_heads), q_dt, o_dt, o["sm_scale"], o["cap"],
                                         o["window_left"], o["causal"], mask_indptr, bool(validate))

        self._set_plan(make, self._plan_opts(causal, window_left, logits_soft_cap, sm_scale))
        self._mask_t = mask
        self._dims = dict(num_tokens=int(qo_h[-1]), kv_tokens=kv_tokens, num_qo_heads=int(num_qo_heads),
                          num_kv_heads=int(num_kv_heads), head_dim=int(head_dim_qk), q_dtype=q_dt, kv_dtype=kv_dt,
                          o_dtype=o_dt)

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, kv_cache_sf=None, sinks=None, return_lse_base_on_e=False):
        r"""Compute batch prefill/append attention between query and kv-cache stored as ragged tensor.

        Parameters
        ----------
        q : Tensor-like, shape ``[qo_indptr[-1], num_qo_heads, head_dim_qk]``
        k : Tensor-like, shape ``[kv_indptr[-1], num_kv_heads, head_dim_qk]``
        v : Tensor-like, shape ``[kv_indptr[-1], num_kv_heads, head_dim_vo]``
        q_scale, o_scale :
            Only None or 1.0.
        k_scale, v_scale, out, lse, return_lse, sinks, return_lse_base_on_e, kv_cache_sf :
            As in :meth:`BatchPrefillWithPagedKVCacheWrapper.run`.

        Returns
        -------
        Tensor or (Tensor, Tensor)
        """
        if self._plan is None:
            raise error("run() before plan()")
        _unsupported_if(kv_cache_sf is not None, "kv_cache_sf (nvfp4 cache scale factors)")
        d, ctx = self._dims, self._ctx
        qshape = (d["num_tokens"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        shp = (d["kv_tokens"], d["num_kv_heads"], d["head_dim"])
        k = check(_arg(ctx, k, "k", shp, d["kv_dtype"]), "k", (d["kv_dtype"],), shp)
        v = check(_arg(ctx, v, "v", shp, d["kv_dtype"]), "v", (d["kv_dtype"],), shp)
        scales = kv_scales(ctx, k_scale, v_scale, d["num_kv_heads"], d["kv_dtype"]) + (None, None)
        return self._run(q, k, v, None, scales, out, lse, return_lse, sinks, return_lse_base_on_e, q_scale, o_scale)

    def run_return_lse(self, q, k, v, *args, **kwargs):
        """:meth:`run` with ``return_lse=True`` (FlashInfer's ``run_return_lse``)."""
        return self.run(q, k, v, *args, **dict(kwargs, return_lse=True))

    def forward(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, window_left=-1,
                logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        r"""FlashInfer's older call form: runs with the given ``causal``, ``window_left``,
        ``logits_soft_cap`` and ``sm_scale`` (other values than the planned ones plan
        again). Returns ``o``."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(**self._plan_opts(causal, window_left, logits_soft_cap, sm_scale))
        return self.run(q, k, v)

    def forward_return_lse(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                           window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        r""":meth:`forward` returning ``(o, lse)`` (base-2 LSE, as FlashInfer)."""
        _check_pos_encoding(pos_encoding_mode)
        self._use(**self._plan_opts(causal, window_left, logits_soft_cap, sm_scale))
        return self.run(q, k, v, return_lse=True)


def _check_prefill_extras(prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
                          window_right):
    _unsupported_if(prefix_len_ptr is not None or token_pos_in_items_ptr is not None or token_pos_in_items_len
                    or max_item_len_ptr is not None, "multi-item scoring (prefix_len_ptr, token_pos_in_items_*)")
    _unsupported_if(window_right not in (None, -1), f"window_right={window_right}")


# ------------------------------------------------------------------------------ merge
def merge_state(v_a, s_a, v_b, s_b, *, out=None, s_out=None, lse_base_on_e=False, ctx=None):
    r"""Merge the attention output ``V`` and the logsumexp value ``S`` from the two KV-segments.

    Parameters
    ----------
    v_a : Tensor-like, shape ``[seq_len, num_heads, head_dim]`` (f32, f16 or bf16)
        The attention output from the KV segment ``A``.
    s_a : Tensor-like, shape ``[seq_len, num_heads]`` float32
        The logsumexp value from segment ``A``, base 2 as FlashInfer's (what the wrappers
        return by default); host arrays of another float type are converted.
    v_b, s_b :
        The same for segment ``B``.
    out, s_out : Optional[Tensor-like]
        Output buffers (allocated when None); ``out`` may be ``v_a`` (in place); numpy
        arrays are written in place.
    lse_base_on_e : bool
        clattn extension: True = every LSE in and out is natural log (no conversion).

    Returns
    -------
    V : Tensor, shape ``[seq_len, num_heads, head_dim]``
        The merged attention output (equivalent to attention with merged KV-segment ``[A: B]``).
    S : Tensor, shape ``[seq_len, num_heads]``
        The logsumexp value from the merged KV-segment ``[A: B]`` (same base as the inputs).
    Numpy ``out`` / ``s_out`` are returned as those arrays.
    """
    c = context_of(v_a, s_a, v_b, s_b, ctx=ctx)
    va = as_tensor(c, v_a, "v_a")
    check(va, "v_a", _FLOAT_IO)
    if len(va.shape) != 3:
        raise error(f"v_a: shape {list(va.shape)}, expected [seq_len, num_heads, head_dim]")
    sa = check(as_tensor(c, s_a, "s_a", "f32"), "s_a", ("f32",), va.shape[:2])
    vb = check(as_tensor(c, v_b, "v_b", va.dtype if _is_bits(v_b, va.dtype) else None), "v_b", (va.dtype,), va.shape)
    sb = check(as_tensor(c, s_b, "s_b", "f32"), "s_b", ("f32",), va.shape[:2])
    wb = Writeback()
    o_t = c.empty(va.shape, va.dtype) if out is None else \
        wb.track(out, "out", lambda: check(as_tensor(c, out, "out"), "out", (va.dtype,), va.shape))
    so_t = c.empty(va.shape[:2], "f32") if s_out is None else \
        wb.track(s_out, "s_out", lambda: check(as_tensor(c, s_out, "s_out"), "s_out", ("f32",), va.shape[:2]))
    if not lse_base_on_e:
        sa, sb = natural_lse(c, sa, s_a), natural_lse(c, sb, s_b)
    _clattn._merge_state(c, va, sa, vb, sb, o_t, so_t)
    if not lse_base_on_e:
        rescale_lse(c, so_t, LOG2E)
    wb.done()
    return result(out, o_t), result(s_out, so_t)


def merge_state_in_place(v, s, v_other, s_other, mask=None, *, lse_base_on_e=False, ctx=None):
    r"""Merge the self-attention state ``(v, s)`` with another state ``(v_other, s_other)``
    in-place: ``v`` and ``s`` are overwritten (device buffers in place; numpy arrays are
    copied to the device and the result written back into them).

    Parameters
    ----------
    v : Tensor-like, shape ``[seq_len, num_heads, head_dim]``
    s : Tensor-like, shape ``[seq_len, num_heads]`` float32 (base-2 LSE, as FlashInfer)
    v_other, s_other :
        The other state.
    mask : None
        FlashInfer's per-row mask is not supported (must be None).
    lse_base_on_e : bool
        clattn extension: True = ``s`` and ``s_other`` are natural log.
    """
    if mask is not None:
        raise error("merge_state_in_place: mask is not supported", "Unsupported")
    c = context_of(v, s, v_other, s_other, ctx=ctx)
    wb = Writeback()
    vt = wb.track(v, "v", lambda: as_tensor(c, v, "v"))
    st = wb.track(s, "s", lambda: as_tensor(c, s, "s"))
    merge_state(vt, st, v_other, s_other, out=vt, s_out=st, lse_base_on_e=lse_base_on_e, ctx=c)
    wb.done()


def merge_states(v, s, *, out=None, s_out=None, lse_base_on_e=False, ctx=None):
    r"""Merge multiple attention states (v, s).

    Parameters
    ----------
    v : Tensor-like, shape ``[seq_len, num_states, num_heads, head_dim]``
        The attention output from the KV segments.
    s : Tensor-like, shape ``[seq_len, num_states, num_heads]`` float32
        The logsumexp value from the KV segments (base 2, as FlashInfer).
    out, s_out : Optional[Tensor-like]
        Output buffers (allocated when None); numpy arrays are written in place.
    lse_base_on_e : bool
        clattn extension: True = ``s`` and the returned LSE are natural log.

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
    st = check(as_tensor(c, s, "s", "f32"), "s", ("f32",), (T, N, H))
    wb = Writeback()
    o_t = c.empty((T, H, D), vt.dtype) if out is None else \
        wb.track(out, "out", lambda: check(as_tensor(c, out, "out"), "out", (vt.dtype,), (T, H, D)))
    so_t = c.empty((T, H), "f32") if s_out is None else \
        wb.track(s_out, "s_out", lambda: check(as_tensor(c, s_out, "s_out"), "s_out", ("f32",), (T, H)))
    if not lse_base_on_e:
        st = natural_lse(c, st, s)
    _clattn._merge_states(c, vt, st, o_t, so_t)
    if not lse_base_on_e:
        rescale_lse(c, so_t, LOG2E)
    wb.done()
    return result(out, o_t), result(s_out, so_t)


# ------------------------------------------------------------------------------ append
def _append_cache(c, x, name, layout, wb):
    """A cache argument of append: a Tensor in `layout` (the 3-D page-size-1 form viewed as
    4-D), a numpy cache tracked for write-back."""
    t = wb.track(x, name, lambda: as_tensor(c, x, name))
    if len(t.shape) == 3:
        n, h, d = t.shape
        t = t.view((n, 1, h, d) if layout == "NHD" else (n, h, 1, d))
    return t


def append_kv(k, v, slot_mapping, k_cache, v_cache, kv_layout="NHD", k_scale=None, v_scale=None,
              validate=True, *, k_scale_cache=None, v_scale_cache=None, dtype=None, kv_data_type=None,
              quant_group=None, ctx=None):
    r"""Writes new K/V rows into the paged cache at ``slot_mapping`` (vLLM's
    ``reshape_and_cache`` / SGLang's ``set_kv_buffer``).

    Parameters
    ----------
    k, v : Tensor-like, shape ``[num_tokens, num_kv_heads, head_dim]`` (f32, f16, bf16)
    slot_mapping : Tensor-like int32/int64 ``[num_tokens]``
        Slot ``s`` goes to page ``s // page_size``, offset ``s % page_size``; negative
        slots are skipped (padding).
    k_cache, v_cache : Tensor-like
        The paged cache (``kv_layout``; 3-D ``[slots, heads, dim]`` = page size 1); fp8
        caches store ``round(value / scale)``; int8 caches (int8 arrays / ``"i8"``
        tensors) store each (token, KV head) row as ``round(row / s)`` with ``s = max |row|
        / 127`` written to the scale caches; int4 caches (``kv_data_type="int4"``: uint8
        arrays / tensors ``[..., head_dim // 2]``, two nibbles a byte, element 2i in the low
        nibble of byte i) store each group of ``quant_group`` elements as nibbles ``u =
        round(x / s) + z`` with its [s, z] pair in the scale caches (docs/kv_formats.md). A
        numpy cache is copied to the device, written and copied back (every call: meant for
        tests, not a serving loop).
    k_scale, v_scale : Optional[float | Tensor-like]
        Quantisation scales of a float cache (default 1): a number, a one-element array, or
        ``[num_kv_heads]`` per-KV-head scales (stored = value / scale[head]). Only None or 1
        with an int8 or int4 cache.
    k_scale_cache, v_scale_cache : Optional[Tensor-like]
        Keyword; int8 / int4 caches only (required there), float32 or float16. int8: where
        each row's scale goes, ``[num_pages, page_size, num_kv_heads]`` (NHD) or
        ``[num_pages, num_kv_heads, page_size]`` (HND; page size 1: ``[slots,
        num_kv_heads]``); int4: those shapes plus ``[head_dim // quant_group, 2]``, where
        each group's [scale, zero] pair goes.
    kv_data_type : Optional[str]
        Keyword; ``"int4"`` for int4 caches (their uint8 tensors do not say it); other
        caches carry their dtype (None, or the same dtype).
    quant_group : Optional[int]
        Keyword; int4 caches: head-dim elements per [scale, zero] pair, 32, 64 (default) or
        128, dividing head_dim.
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
    wb = Writeback()
    kc = _append_cache(c, k_cache, "k_cache", kv_layout, wb)
    vc = _append_cache(c, v_cache, "v_cache", kv_layout, wb)
    kv_dt = _append_kv_dtype(kc, kv_data_type)
    head_dim = kt.shape[2] if len(kt.shape) == 3 else 0
    group = quant_group_of(kv_dt, quant_group, head_dim)
    ks, vs, kh, vh = kv_scales(c, k_scale, v_scale, kt.shape[1] if len(kt.shape) == 3 else 0, kv_dt)
    ksc, vsc = _append_scale_caches(c, kc, k_scale_cache, v_scale_cache, kv_layout, wb, kv_dt,
                                    head_dim // group if group else 0)
    _clattn._append_kv(c, kt, vt, sl, kc, vc, kv_layout, ks, vs, host, ksc, vsc, kh, vh,
                       "i4" if kv_dt == "i4" else "", group)
    wb.done()


def _append_kv_dtype(kc, kv_data_type):
    """The cache dtype of an append into tensor kc: its own, or int4 (u8 tensors) when named."""
    want = dtype_name(kv_data_type, "kv_data_type")
    if want == "i4":
        if kc.dtype != "u8":
            raise error(f"k_cache: dtype {kc.dtype}; an int4 cache is uint8 bytes of two nibbles each "
                        "([..., head_dim // 2])")
        return "i4"
    if want is not None and want != kc.dtype:
        raise error(f"kv_data_type={kv_data_type!r}: the caches are {kc.dtype}")
    if kc.dtype == "u8":
        raise error("k_cache: a uint8 cache is an int4 cache (say kv_data_type='int4') or fp8 bits (pass fp8 "
                    "tensors, clattn.Context.empty(shape, 'fp8_e4m3'))")
    return kc.dtype


def _append_scale_caches(c, kc, k_scale_cache, v_scale_cache, kv_layout, wb, kv_dtype, groups):
    """The scale caches of an append into cache kc of kv_dtype (4-D; page size 1 also as
    [slots, heads], int4 [slots, heads, groups, 2])."""
    if len(kc.shape) != 4:
        raise error(f"k_cache: shape {list(kc.shape)}, expected 4 dims ({kv_layout}) or 3 (page size 1)")
    n, p, h, _ = _cache_dims(kc, kv_layout)

    shape3 = scale_cache_shape(kv_layout, n, 1, h, kv_dtype, groups)
    page1 = len(shape3) - 1  # the dims of the page-size-1 form (no page-offset axis)

    def track(x, name, make):  # page size 1 also takes [slots, heads, ...] (the cache's 3-D form)
        if p == 1 and len(getattr(x, "shape", ())) == page1 and int(np.prod(x.shape)) == int(np.prod(shape3)):
            if isinstance(x, np.ndarray):
                x3 = x.reshape(shape3)  # a view: the write-back lands in x
                return wb.track(x3, name, lambda: as_tensor(c, x3, name))
            if isinstance(x, _clattn.Tensor):
                return x.view(shape3)
        return wb.track(x, name, make)

    return scale_caches(c, kv_dtype, k_scale_cache, v_scale_cache, kv_layout, n, p, h, track=track, groups=groups)


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
                          kv_indptr, kv_last_page_len, kv_layout="NHD", *, k_scale_cache=None, v_scale_cache=None,
                          k_scale=None, v_scale=None, dtype=None, kv_data_type=None, quant_group=None, ctx=None):
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
    k_scale_cache, v_scale_cache : Optional[Tensor-like]
        Keyword; an int8 or int4 cache's scale caches (required there), as :func:`append_kv`
        takes them: each new row's scale (int8) or group pairs (int4) are written beside it.
    k_scale, v_scale : Optional[float | Tensor-like]
        Keyword; quantisation scales of a float (fp8) cache, one value or ``[num_kv_heads]``
        (as :func:`append_kv`).
    kv_data_type, quant_group : Optional
        Keyword; ``kv_data_type="int4"`` for int4 caches (uint8 nibble pairs, ``[...,
        head_dim // 2]``) with their group size (32, 64 (default) or 128), as
        :func:`append_kv`.

    Note
    ----
    The slot of every token is computed on the host from the CSR (device arrays are
    copied back), then :func:`append_kv` writes the rows.
    """
    k_cache, v_cache = _split_kv_cache(paged_kv_cache)
    c = context_of(append_key, append_value, k_cache, v_cache, ctx=ctx)
    slots = _append_slots(c, k_cache, kv_layout, batch_indices, positions, kv_indices, kv_indptr)
    append_kv(append_key, append_value, slots, k_cache, v_cache, kv_layout, k_scale, v_scale,
              k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache, dtype=dtype, kv_data_type=kv_data_type,
              quant_group=quant_group, ctx=c)


def _append_slots(c, k_cache, kv_layout, batch_indices, positions, kv_indices, kv_indptr):
    """int64 cache slots of appended tokens from FlashInfer's append metadata (on the host:
    device arrays are copied back); a position outside its request's pages is an error."""
    shape = tuple(k_cache.shape) if hasattr(k_cache, "shape") else tuple(as_tensor(c, k_cache, "k_cache").shape)
    if len(shape) not in (3, 4):
        raise error(f"k_cache: shape {list(shape)}, expected 4 dims ({kv_layout}) or 3 (page size 1)")
    page_size = 1 if len(shape) == 3 else shape[1] if kv_layout == "NHD" else shape[2]
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
    return ind[ip[bi] + page_in_req].astype(np.int64) * page_size + pos % page_size
