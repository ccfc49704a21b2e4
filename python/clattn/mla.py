"""FlashInfer-shaped MLA (DeepSeek-V2/V3 multi-head latent attention, absorbed form)."""
import numpy as np

from . import _clattn
from ._util import (LOG2E, Writeback, as_tensor, check, dtype_name, error, host_i32, is_raw_buffer, rescale_lse,
                    result, _ITEMSIZE)
from ._kv_quant import LATENT_SCALE_DTYPES, latent_kv_scale, latent_scale_cache
from .attention import _Wrapper, _arg, _outputs, _unsupported_if

CKV_DIM, KPE_DIM = 512, 64


def _plan_checks(head_dim_ckv, head_dim_kpe, sm_scale, q_data_type, kv_data_type, o_data_type):
    """An MLA plan's widths and scale checked, and its (q, kv, o) dtype names (kv and o
    default to q's): the dense and the sparse wrapper's."""
    if head_dim_ckv != CKV_DIM or head_dim_kpe != KPE_DIM:
        raise error(f"head_dim_ckv/head_dim_kpe = {head_dim_ckv}/{head_dim_kpe}: only 512/64 are served",
                    "Unsupported")
    if sm_scale is None or not sm_scale > 0:
        raise error("sm_scale is required (> 0) for MLA")
    q_dt = dtype_name(q_data_type, "q_data_type")
    kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
    o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
    return q_dt, kv_dt, o_dt


def _scale_dtype(kv_scale_data_type):
    dt = dtype_name(kv_scale_data_type, "kv_scale_data_type")
    if dt not in LATENT_SCALE_DTYPES:
        raise error(f"kv_scale_data_type: {dt}, expected float32 or float16 (the int8 latent's scale cache)")
    return dt


class _LatentPlans:
    """The plans of one ``plan()`` call, one per scale-cache dtype: an int8 latent's plan
    records its scale dtype, so a ``run`` with a scale cache of the other dtype plans again
    from the same metadata (once; kept)."""

    def _set_plans(self, make, scale_dtype):
        self._make, self._plans = make, {}
        self._use_scales(scale_dtype)

    def _use_scales(self, scale_dtype):
        if scale_dtype not in self._plans:
            self._plans[scale_dtype] = self._make(scale_dtype)
        self._plan = self._plans[scale_dtype]

    def _latent_side(self, ckv_pages, scale_cache, ckv_scale, kpe_scale, kv_scale):
        """(kv_scale, scale_cache tensor or None) of a run, checked against the plan."""
        d = self._dims
        scale = latent_kv_scale(d["kv_dtype"], ckv_scale, kpe_scale, kv_scale)
        sc = latent_scale_cache(self._ctx, d["kv_dtype"], scale_cache, ckv_pages, d["page_size"],
                                d["scale_dtype"])
        if sc is not None:
            self._use_scales(sc.dtype)
        return scale, sc


class BatchMLAPagedAttentionWrapper(_LatentPlans, _Wrapper):
    r"""Wrapper class for MLA (`Multi-head Latent Attention <https://arxiv.org/abs/2405.04434>`_)
    PagedAttention on DeepSeek models, shaped like ``flashinfer.mla.BatchMLAPagedAttentionWrapper``.
    This kernel can be used in decode, and incremental prefill and should be used together
    with the matrix absorption trick: ``q_nope`` is already multiplied by ``W_UK`` and the
    output ``[T, num_heads, head_dim_ckv]`` is projected by ``W_UV`` afterwards.

    Scores are ``sm_scale * (q_nope . ckv + q_pe . kpe)``; values are ``ckv``.
    Only ``head_dim_ckv = 512`` and ``head_dim_kpe = 64`` are served. An int8 latent cache
    (``kv_data_type="int8"``) comes with a scale cache (``run``'s ``scale_cache``: a (ckv
    scale, kpe scale) pair per token; docs/kv_formats.md "int8 MLA latent").

    Example
    -------
    >>> mla_wrapper = clattn.BatchMLAPagedAttentionWrapper(ctx)
    >>> mla_wrapper.plan(q_indptr, kv_indptr, kv_indices, kv_lens, num_local_heads,
    ...                  head_dim_ckv=512, head_dim_kpe=64, page_size=64, causal=False,
    ...                  sm_scale=1.0 / ((128 + 64) ** 0.5), q_data_type="bfloat16",
    ...                  kv_data_type="bfloat16")
    >>> o = mla_wrapper.run(q_nope, q_pe, ckv, kpe, return_lse=False)
    """

    def __init__(self, float_workspace_buffer=None, use_cuda_graph=False, qo_indptr=None, kv_indptr=None,
                 kv_indices=None, kv_len_arr=None, backend="auto", *, ctx=None):
        r"""Constructor of :class:`BatchMLAPagedAttentionWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            Workspace for split-K partial states (grown by the wrapper when too small), a
            Context, or None (default context).
        use_cuda_graph, qo_indptr, kv_indptr, kv_indices, kv_len_arr, backend :
            Accepted for FlashInfer compatibility and ignored.
        """
        self._init_wrapper(float_workspace_buffer, ctx)

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe,
             page_size, causal, sm_scale, q_data_type, kv_data_type, use_profiler=False, o_data_type=None,
             validate=True, *, kv_scale_data_type="float32"):
        r"""Plan the MLA attention computation.

        Parameters
        ----------
        qo_indptr : array int32 ``[batch_size + 1]``
            The indptr of the query/output tensor (all lengths 1 = decode).
        kv_indptr : array int32 ``[batch_size + 1]``
            The indptr of the paged kv-cache (pages).
        kv_indices : array int32 ``[kv_indptr[-1]]``
            The page indices of the paged kv-cache.
        kv_len_arr : array int32 ``[batch_size]``
            The kv length of each request.
        num_heads : int
            The number of heads in query/output tensor (1..128).
        head_dim_ckv : int
            The head dimension of compressed-kv (512).
        head_dim_kpe : int
            The head dimension for rope k-cache (64).
        page_size : int
            The page size of the paged kv-cache (power of two, 1..256).
        causal : bool
            Whether to use causal attention (rows aligned to the end of the keys).
        sm_scale : float
            The scale factor for softmax operation (required: model-dependent).
        q_data_type, kv_data_type :
            dtypes of q (f32/f16/bf16) and the latent cache (f16/bf16/fp8_e4m3/int8, f32
            where local memory allows). An int8 latent comes with a scale cache (``run``'s
            ``scale_cache``).
        use_profiler : bool
            Ignored.
        kv_scale_data_type : str
            Keyword; int8 latents: the scale cache's dtype, float32 (default) or float16 (a
            ``run`` with the other dtype plans again).
        """
        q_dt, kv_dt, o_dt = _plan_checks(head_dim_ckv, head_dim_kpe, sm_scale, q_data_type, kv_data_type,
                                         o_data_type)
        sc_dt = _scale_dtype(kv_scale_data_type)
        qo = host_i32(qo_indptr, "qo_indptr")
        ip = host_i32(kv_indptr, "kv_indptr")
        ind = host_i32(kv_indices, "kv_indices")
        kl = host_i32(kv_len_arr, "kv_len_arr")
        if len(ip) != len(kl) + 1 or len(qo) != len(kl) + 1:
            raise error(f"qo_indptr ({len(qo)}), kv_indptr ({len(ip)}) and kv_len_arr ({len(kl)}) "
                        "disagree on the batch size")
        npg = np.diff(ip)
        expect = (kl + page_size - 1) // page_size
        bad = np.nonzero(npg != expect)[0]
        if bad.size:
            i = int(bad[0])
            raise error(f"kv_len_arr[{i}] = {int(kl[i])} needs {int(expect[i])} pages, kv_indptr gives {int(npg[i])}")
        last = np.where(npg > 0, kl - (npg - 1) * page_size, 0).astype(np.int32)
        extend = bool(np.any(np.diff(qo) != 1))
        num_pages = int(ind.max()) + 1 if ind.size else 1
        self._plan = None

        def make(scale_dtype):
            return _clattn._mla_plan(self._ctx, qo if extend else None, ip, ind, last, int(page_size), num_pages,
                                     kv_dt, int(num_heads), q_dt, o_dt, float(sm_scale), bool(causal), extend,
                                     bool(validate), scale_dtype)

        self._set_plans(make, sc_dt)
        self._indices = self._ctx.to_device(ind if ind.size else np.zeros(1, np.int32), "i32")
        self._dims = dict(num_tokens=int(qo[-1]), num_heads=int(num_heads), page_size=int(page_size),
                          num_pages=num_pages, q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt, scale_dtype=sc_dt)

    def _cache(self, x, name, width):
        d = self._dims
        if is_raw_buffer(x):
            per_page = d["page_size"] * width * _ITEMSIZE[d["kv_dtype"]]
            n = self._ctx.wrap(x, (1,), "u8").buffer_bytes // per_page
            return as_tensor(self._ctx, x, name, d["kv_dtype"], (n, d["page_size"], width))
        return _arg(self._ctx, x, name, None, d["kv_dtype"])

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, profiler_buffer=None,
            kv_len=None, page_table=None, return_lse_base_on_e=False, o_scale=None, *, ckv_scale=None,
            ckv_scale_arr=None, kpe_scale=None, kv_scale=None, scale_cache=None):
        r"""Run the MLA attention computation.

        Parameters
        ----------
        q_nope : Tensor-like ``[T, num_heads, head_dim_ckv]``
            The query tensor without rope (already absorbed by ``W_UK``).
        q_pe : Tensor-like ``[T, num_heads, head_dim_kpe]``
            The rope part of the query tensor.
        ckv_cache : Tensor-like ``[num_pages, page_size, head_dim_ckv]``
            The compressed kv-cache (int8 latents: numpy ``int8`` / tensors of dtype ``i8``,
            ``kpe_cache`` likewise).
        kpe_cache : Tensor-like ``[num_pages, page_size, head_dim_kpe]``
            The rope part of the kv-cache.
        out : Optional[Tensor-like] ``[T, num_heads, head_dim_ckv]``
            Output buffer (allocated when None); a numpy array is written in place.
        lse : Optional[Tensor-like] ``[T, num_heads]`` float32
            LSE buffer (allocated when None and return_lse).
        return_lse : bool
            Whether to return the log-sum-exp value.
        return_lse_base_on_e : bool
            False (default): base-2 LSE, as FlashInfer; True: natural log.
        ckv_scale, kpe_scale : Optional[float]
            Dequantisation scales of an fp8 latent cache. clattn's kernel takes one scale for
            both caches: ``kpe_scale`` must be None or equal ``ckv_scale``. Only None or 1
            with an int8 latent.
        kv_scale : Optional[float]
            clattn's name for that one scale (keyword; ``ckv_scale`` wins when both given).
        scale_cache : Optional[Tensor-like] ``[num_pages, page_size, 2]`` float32 / float16
            Keyword; int8 latents only (required there): the (ckv scale, kpe scale) pair of
            every token, the caches' page count; loaded = stored * its part's scale.
        profiler_buffer, kv_len, page_table, o_scale, ckv_scale_arr :
            Not supported (must be None).
        """
        if self._plan is None:
            raise error("run() before plan()")
        if profiler_buffer is not None or kv_len is not None or page_table is not None:
            raise error("profiler_buffer / kv_len / page_table are not supported", "Unsupported")
        _unsupported_if(o_scale is not None, "o_scale (fp8 output)")
        _unsupported_if(ckv_scale_arr is not None, "ckv_scale_arr (per-token channel-block scales)")
        d, ctx = self._dims, self._ctx
        T, H = d["num_tokens"], d["num_heads"]
        qn = check(_arg(ctx, q_nope, "q_nope", (T, H, CKV_DIM), d["q_dtype"]), "q_nope", (d["q_dtype"],),
                   (T, H, CKV_DIM))
        qp = check(_arg(ctx, q_pe, "q_pe", (T, H, KPE_DIM), d["q_dtype"]), "q_pe", (d["q_dtype"],), (T, H, KPE_DIM))
        ckv = check(self._cache(ckv_cache, "ckv_cache", CKV_DIM), "ckv_cache", (d["kv_dtype"],),
                    (None, d["page_size"], CKV_DIM))
        kpe = check(self._cache(kpe_cache, "kpe_cache", KPE_DIM), "kpe_cache", (d["kv_dtype"],),
                    (ckv.shape[0], d["page_size"], KPE_DIM))
        if ckv.shape[0] < d["num_pages"]:
            raise error(f"ckv_cache: {ckv.shape[0]} pages, the planned indices reach page {d['num_pages'] - 1}")
        scale, sc = self._latent_side(ckv.shape[0], scale_cache, ckv_scale, kpe_scale, kv_scale)
        wb = Writeback()
        o_t, lse_t = _outputs(ctx, wb, out, lse, return_lse, (T, H, CKV_DIM), d["o_dtype"])
        ws = self._ws.get(self._plan.workspace_bytes)
        _clattn._mla_run(ctx, self._plan, qn, qp, ckv, kpe, self._indices, o_t, lse_t, ws, scale, sc)
        if not return_lse_base_on_e:
            rescale_lse(ctx, lse_t, LOG2E)
        wb.done()
        o_r = result(out, o_t)
        return (o_r, result(lse, lse_t)) if return_lse else o_r
