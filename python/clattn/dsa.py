"""DeepSeek sparse attention (DSA, DeepSeek-V3.2) for MLA: the lightning indexer (top-k token
positions per request from a small paged key cache) and sparse MLA decode over those
positions. Semantics: include/clattn/sparse.hpp (DSA section), docs/sparse.md; the Python
conventions: docs/python.md."""
import numpy as np

from . import _clattn
from ._util import (LOG2E, Writeback, as_tensor, check, dtype_name, error, is_host_array, is_raw_buffer,
                    rescale_lse, result, scale_value, _ITEMSIZE)
from .attention import _Wrapper, _arg, _metadata, _num_pages, _outputs
from .mla import CKV_DIM, KPE_DIM, _LatentPlans, _plan_checks, _scale_dtype


def _typed(ctx, x, name, dtype, shape, kinds):
    """An input of a fixed dtype: host arrays of the right kind are converted (e.g. int64
    positions to int32), other kinds rejected rather than reinterpreted."""
    if is_host_array(x):
        a = np.asarray(x)
        if a.dtype.kind not in kinds:
            raise error(f"{name}: numpy {a.dtype} values, expected {dtype}")
        x = a
    return check(as_tensor(ctx, x, name, dtype, shape), name, (dtype,), shape)


class DsaIndexer(_Wrapper):
    r"""The DSA lightning indexer (DeepSeek-V3.2): per request (one query row) it scores every
    cached key and keeps the ``topk`` highest token positions.

    ``score[b, t] = sum_h weights[b, h] * relu(q[b, h] . k[t])`` for the positions
    ``t < L_b`` of request ``b`` (fold the softmax scale and ``Hi^-1/2`` into ``weights``);
    the ``topk`` highest positions (ties: the lower position) come back in ascending
    position order, padded with -1 (scores -inf): ``indices [B, topk]`` int32 logical
    positions, ready for :meth:`MlaSparseDecodeWrapper.run`, and ``scores [B, topk]``
    float32. The key cache holds one head: ``[num_pages, page_size, index_dim]`` (or with a
    head axis of 1); it is paged like the latent cache, so one CSR or block table plans both.

    Example
    -------
    >>> idx = clattn.DsaIndexer(ctx)
    >>> idx.plan(kv_indptr, kv_indices, kv_last_page_len, num_index_heads=64, index_dim=128,
    ...          page_size=64, topk=2048, q_data_type="bfloat16", kv_data_type="fp8_e4m3")
    >>> indices, scores = idx.run(q_idx, weights, k_index_cache, k_scale=s)
    """

    def __init__(self, float_workspace_buffer=None, *, ctx=None):
        r"""Constructor of :class:`DsaIndexer`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            Workspace (the batch's scores; grown by the indexer when too small), a Context,
            or None (default context).
        """
        self._init_wrapper(float_workspace_buffer, ctx)



    def plan(self, kv_indptr, kv_indices, kv_last_page_len, num_index_heads, index_dim, page_size, topk,
             q_data_type="bfloat16", kv_data_type=None, *, block_tables=None, seq_lens=None, num_pages=None,
             validate=True):
        r"""Plan the indexer for one decode batch.

        Parameters
        ----------
        kv_indptr, kv_indices, kv_last_page_len : int32 arrays ``[B + 1]``, ``[kv_indptr[-1]]``, ``[B]``
            FlashInfer CSR of the paged key cache. All three None when ``block_tables`` is given.
        num_index_heads : int
            Indexer heads ``Hi`` (64 in DeepSeek-V3.2), 1..1024.
        index_dim : int
            Indexer head dim ``Di`` (128 in DeepSeek-V3.2), a multiple of 16 up to 1024.
        page_size : int
            A power of two up to 256.
        topk : int
            Positions kept per request, 1..65536 (2048 in DeepSeek-V3.2).
        q_data_type, kv_data_type :
            q: float32 / float16 / bfloat16; the key cache also fp8_e4m3 / fp8_e5m2 (default: q's).
        block_tables : Optional int32 ``[B, max_pages]``, keyword
            Page-table form (with ``seq_lens`` ``[B]``) instead of the CSR.
        num_pages : Optional[int], keyword
            The cache's page count; default the largest planned page id + 1.
        validate : bool, keyword
            Run the O(pages) metadata validation.
        """
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        ip, ind, last, bt, sl, batch, max_pages, used = _metadata(kv_indptr, kv_indices, kv_last_page_len,
                                                                  "kv_last_page_len", block_tables, seq_lens)
        pages = _num_pages(used, num_pages)
        self._plan = _clattn._dsa_index_plan(self._ctx, ip, ind, last, bt, sl, max_pages, int(page_size), pages,
                                             int(index_dim), kv_dt, int(num_index_heads), int(topk), q_dt,
                                             bool(validate))
        ids = bt if bt is not None else ind
        self._page_ids = self._ctx.to_device(ids if ids.size else np.zeros(1, np.int32), "i32")
        self._dims = dict(batch_size=batch, num_index_heads=int(num_index_heads), index_dim=int(index_dim),
                          page_size=int(page_size), num_pages=pages, topk=int(topk), q_dtype=q_dt, kv_dtype=kv_dt)

    def _cache(self, x):
        d, ctx = self._dims, self._ctx
        row = (d["page_size"], d["index_dim"])
        if is_raw_buffer(x):
            n = ctx.wrap(x, (1,), "u8").buffer_bytes // (d["page_size"] * d["index_dim"] * _ITEMSIZE[d["kv_dtype"]])
            return as_tensor(ctx, x, "k_index_cache", d["kv_dtype"], (n,) + row)
        t = check(_arg(ctx, x, "k_index_cache", None, d["kv_dtype"]), "k_index_cache", (d["kv_dtype"],))
        s = tuple(t.shape)
        if len(s) == 4 and s[2] == 1:
            s = (s[0], s[1], s[3])
        if len(s) != 3 or s[1:] != row:
            raise error(f"k_index_cache: shape {list(t.shape)}, expected [*, {row[0]}, {row[1]}] "
                        f"or [*, {row[0]}, 1, {row[1]}]")
        if s[0] < d["num_pages"]:
            raise error(f"k_index_cache: {s[0]} pages, the planned page ids reach page {d['num_pages'] - 1}")
        return t

    def run(self, q, weights, k_index_cache, *, k_scale=None, out_indices=None, out_scores=None, return_scores=True):
        r"""Score every key of each request and keep the top-k positions.

        Parameters
        ----------
        q : Tensor-like ``[batch_size, num_index_heads, index_dim]``
            Indexer queries (q_data_type).
        weights : Tensor-like float32 ``[batch_size, num_index_heads]``
            Per-head weights, scales folded in.
        k_index_cache : Tensor-like ``[num_pages, page_size, index_dim]`` (or ``[.., 1, index_dim]``)
            The paged indexer key cache.
        k_scale : Optional[float]
            Dequantisation scale of an fp8 cache (loaded = stored * k_scale).
        out_indices, out_scores : Optional destinations (int32 / float32 ``[batch_size, topk]``).
        return_scores : bool
            False: the scores are neither written nor returned (None), unless ``out_scores``.

        Returns
        -------
        (indices, scores)
            int32 positions (ascending, -1 padded) and float32 scores (-inf padded), each
            ``[batch_size, topk]``; scores None when not asked for.
        """
        if self._plan is None:
            raise error("run() before plan()")
        ks = scale_value(k_scale, "k_scale")
        d, ctx = self._dims, self._ctx
        B, Hi = d["batch_size"], d["num_index_heads"]
        qshape, oshape = (B, Hi, d["index_dim"]), (B, d["topk"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        w = _typed(ctx, weights, "weights", "f32", (B, Hi), "f")
        k = self._cache(k_index_cache)
        wb = Writeback()
        idx_t = self._dest(wb, out_indices, "out_indices", oshape, "i32")
        want_scores = return_scores or out_scores is not None
        sc_t = self._dest(wb, out_scores, "out_scores", oshape, "f32") if want_scores else None
        _clattn._dsa_index_run(ctx, self._plan, q, w, k, self._page_ids, idx_t, sc_t,
                               self._ws.get(self._plan.workspace_bytes), ks)
        wb.done()
        return result(out_indices, idx_t), (result(out_scores, sc_t) if want_scores else None)

    def _dest(self, wb, x, name, shape, dtype):
        if x is None:
            return self._ctx.empty(shape, dtype)
        return wb.track(x, name, lambda: check(_arg(self._ctx, x, name, shape, dtype), name, (dtype,), shape))


class MlaSparseDecodeWrapper(_LatentPlans, _Wrapper):
    r"""Sparse MLA decode (DeepSeek-V3.2 DSA, FlashMLA's sparse decode): each request's query
    row attends only to the latent rows at the token positions its index list names.

    Like :class:`BatchMLAPagedAttentionWrapper`'s decode (absorbed form: scores
    ``sm_scale * (q_nope . ckv + q_pe . kpe)``, values ``ckv``, ``o [B, num_heads, 512]``),
    restricted to ``indices[b, 0 .. topk)``: logical positions of request ``b``, e.g.
    :meth:`DsaIndexer.run`'s output left on the device. -1 and positions outside
    ``[0, L_b)`` add nothing; a position listed twice counts twice; a request with no valid
    position gets ``o = 0``, ``lse = -inf``.

    Example
    -------
    >>> w = clattn.MlaSparseDecodeWrapper(ctx)
    >>> w.plan(kv_indptr, kv_indices, kv_len_arr, num_heads=16, head_dim_ckv=512,
    ...        head_dim_kpe=64, page_size=64, sm_scale=s, topk=2048, q_data_type="bfloat16")
    >>> indices, _ = indexer.run(q_idx, weights, k_index_cache, return_scores=False)
    >>> o = w.run(q_nope, q_pe, ckv_cache, kpe_cache, indices)
    """

    def __init__(self, float_workspace_buffer=None, *, ctx=None):
        r"""Constructor of :class:`MlaSparseDecodeWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            Workspace for split-K partial states (grown by the wrapper when too small), a
            Context, or None (default context).
        """
        self._init_wrapper(float_workspace_buffer, ctx)



    def plan(self, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size, sm_scale,
             topk, q_data_type="bfloat16", kv_data_type=None, o_data_type=None, *, block_tables=None,
             seq_lens=None, num_pages=None, max_splits=0, validate=True, kv_scale_data_type="float32"):
        r"""Plan sparse MLA decode for one batch (one query row per request).

        Parameters
        ----------
        kv_indptr, kv_indices, kv_len_arr : int32 arrays ``[B + 1]``, ``[kv_indptr[-1]]``, ``[B]``
            The paged latent cache's CSR and each request's kv length (as
            :class:`BatchMLAPagedAttentionWrapper`). All three None when ``block_tables`` is given.
        num_heads : int
            Query heads (1..128).
        head_dim_ckv, head_dim_kpe : int
            512 and 64 (the only dims served).
        page_size : int
            A power of two, 1..256.
        sm_scale : float
            The softmax scale (required, > 0).
        topk : int
            Entries of each request's index list, 1..65536.
        q_data_type, kv_data_type, o_data_type :
            q and o float32 / float16 / bfloat16; the latent cache float16 / bfloat16 /
            fp8_e4m3 / int8 (float32 where local memory allows); kv and o default to q's.
            An int8 latent comes with a scale cache (``run``'s ``scale_cache``).
        block_tables : Optional int32 ``[B, max_pages]``, keyword
            Page-table form (with ``seq_lens`` ``[B]``) instead of the CSR.
        num_pages : Optional[int], keyword
            The cache's page count; default the largest planned page id + 1.
        max_splits : int, keyword
            KV chunks per request (0 = planner's choice, 1 = never split).
        validate : bool, keyword
            Run the O(pages) metadata validation.
        kv_scale_data_type : str, keyword
            int8 latents: the scale cache's dtype, float32 (default) or float16 (a ``run``
            with the other dtype plans again).
        """
        q_dt, kv_dt, o_dt = _plan_checks(head_dim_ckv, head_dim_kpe, sm_scale, q_data_type, kv_data_type,
                                         o_data_type)
        sc_dt = _scale_dtype(kv_scale_data_type)
        ip, ind, kl, bt, sl, batch, max_pages, used = _metadata(kv_indptr, kv_indices, kv_len_arr, "kv_len_arr",
                                                                block_tables, seq_lens)
        last = None
        if ip is not None:
            npg = np.diff(ip)
            expect = (kl + page_size - 1) // page_size
            bad = np.nonzero(npg != expect)[0]
            if bad.size:
                i = int(bad[0])
                raise error(f"kv_len_arr[{i}] = {int(kl[i])} needs {int(expect[i])} pages, kv_indptr gives "
                            f"{int(npg[i])}")
            last = np.where(npg > 0, kl - (npg - 1) * page_size, 0).astype(np.int32)
        pages = _num_pages(used, num_pages)
        self._plan = None

        def make(scale_dtype):
            return _clattn._mla_sparse_plan(self._ctx, ip, ind, last, bt, sl, max_pages, int(page_size), pages,
                                            kv_dt, int(num_heads), q_dt, o_dt, float(sm_scale), int(topk),
                                            int(max_splits), bool(validate), scale_dtype)

        self._set_plans(make, sc_dt)
        ids = bt if bt is not None else ind
        self._page_ids = self._ctx.to_device(ids if ids.size else np.zeros(1, np.int32), "i32")
        self._dims = dict(batch_size=batch, num_heads=int(num_heads), page_size=int(page_size), num_pages=pages,
                          topk=int(topk), q_dtype=q_dt, kv_dtype=kv_dt, o_dtype=o_dt, scale_dtype=sc_dt)

    def _cache(self, x, name, width, pages=None):
        d, ctx = self._dims, self._ctx
        if is_raw_buffer(x):
            n = ctx.wrap(x, (1,), "u8").buffer_bytes // (d["page_size"] * width * _ITEMSIZE[d["kv_dtype"]])
            t = as_tensor(ctx, x, name, d["kv_dtype"], (n, d["page_size"], width))
        else:
            t = _arg(ctx, x, name, None, d["kv_dtype"])
        return check(t, name, (d["kv_dtype"],), (pages, d["page_size"], width))

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, indices, out=None, lse=None, return_lse=False, *,
            return_lse_base_on_e=False, ckv_scale=None, kpe_scale=None, kv_scale=None, scale_cache=None):
        r"""Run sparse MLA decode over the index lists.

        Parameters
        ----------
        q_nope : Tensor-like ``[batch_size, num_heads, 512]``
        q_pe : Tensor-like ``[batch_size, num_heads, 64]``
        ckv_cache : Tensor-like ``[num_pages, page_size, 512]``
        kpe_cache : Tensor-like ``[num_pages, page_size, 64]``
        indices : Tensor-like int32 ``[batch_size, topk]``
            Logical token positions per request (-1 padding), e.g. :meth:`DsaIndexer.run`'s
            output (used on the device, no host round trip).
        out : Optional destination ``[batch_size, num_heads, 512]`` (o_data_type)
        lse : Optional destination ``[batch_size, num_heads]`` float32
        return_lse : bool
            Also return the LSE (base 2 unless ``return_lse_base_on_e``, keyword).
        ckv_scale, kpe_scale, kv_scale : Optional[float], keyword
            One dequantisation scale for an fp8 latent cache, as
            :meth:`BatchMLAPagedAttentionWrapper.run` (``kpe_scale`` must equal ``ckv_scale``;
            only None or 1 with an int8 latent).
        scale_cache : Optional[Tensor-like] ``[num_pages, page_size, 2]`` float32 / float16, keyword
            int8 latents only (required there): the (ckv scale, kpe scale) pair of every
            token, as :meth:`BatchMLAPagedAttentionWrapper.run`.

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` (and ``lse`` when ``return_lse``).
        """
        if self._plan is None:
            raise error("run() before plan()")
        d, ctx = self._dims, self._ctx
        B, H = d["batch_size"], d["num_heads"]
        qn = check(_arg(ctx, q_nope, "q_nope", (B, H, CKV_DIM), d["q_dtype"]), "q_nope", (d["q_dtype"],),
                   (B, H, CKV_DIM))
        qp = check(_arg(ctx, q_pe, "q_pe", (B, H, KPE_DIM), d["q_dtype"]), "q_pe", (d["q_dtype"],), (B, H, KPE_DIM))
        ckv = self._cache(ckv_cache, "ckv_cache", CKV_DIM)
        kpe = self._cache(kpe_cache, "kpe_cache", KPE_DIM, ckv.shape[0])
        if ckv.shape[0] < d["num_pages"]:
            raise error(f"ckv_cache: {ckv.shape[0]} pages, the planned page ids reach page {d['num_pages'] - 1}")
        scale, sc = self._latent_side(ckv.shape[0], scale_cache, ckv_scale, kpe_scale, kv_scale)
        ishape = (B, d["topk"])
        idx = _typed(ctx, indices, "indices", "i32", ishape, "iu")
        wb = Writeback()
        o_t, lse_t = _outputs(ctx, wb, out, lse, return_lse, (B, H, CKV_DIM), d["o_dtype"])
        _clattn._mla_sparse_run(ctx, self._plan, qn, qp, ckv, kpe, self._page_ids, idx, o_t, lse_t,
                                self._ws.get(self._plan.workspace_bytes), scale, sc)
        if not return_lse_base_on_e:
            rescale_lse(ctx, lse_t, LOG2E)
        wb.done()
        o_r = result(out, o_t)
        return (o_r, result(lse, lse_t)) if return_lse else o_r
