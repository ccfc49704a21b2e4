"""Hierarchical sparse attention (HSA) decode, shaped like SGLang's HSA backend: top-k page
selection by landmark keys, then decode over the selected pages plus an optional dense
window. Semantics: include/clattn/sparse.hpp; differences from FlashInfer-style wrappers:
docs/python.md."""
import numpy as np

from . import _clattn
from ._util import LOG2E, Writeback, as_tensor, check, error, dtype_name, rescale_lse, result, scale_value
from .attention import (_Planned, _Wrapper, _arg, _cache_arg, _check_cache, _metadata, _num_pages, _opt_cap,
                        _opt_scale, _outputs)


class HsaDecodeWrapper(_Planned, _Wrapper):
    r"""Decode with Hierarchical Sparse Attention over a paged KV cache (SGLang's
    ``--attention-backend hsa``).

    Page size is the chunk size; the **last slot of every page holds the page's landmark
    key** (LMK, slot ``page_id * page_size + page_size - 1``). Per request of ``L`` keys
    with window ``W`` (0 = none), the candidates are its completed pages before the window
    (page ``j`` with ``(j + 1) * page_size <= L - W``). :meth:`select` scores each candidate
    by ``sm_scale * q . K_lmk`` per selection list (``"group"``: one list per KV head, the
    query rows of its group summed; ``"head"``: one list per query head) and keeps the
    ``topk`` highest (ties: the earlier candidate), written in candidate order and padded
    with -1 / -inf. :meth:`run` attends each query head to the union of the window (when
    ``fuse_window``) and the keys of its list's pages, each key once.

    Example
    -------
    >>> w = clattn.HsaDecodeWrapper(ctx)
    >>> w.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads=32, num_kv_heads=8,
    ...        head_dim=128, page_size=64, topk=64, selection_strategy="group",
    ...        window_size=512, q_data_type="bfloat16")
    >>> o = w.run(q, k_cache, v_cache)                   # select + sparse decode
    >>> ids, scores = w.select(q, k_cache)               # or the two steps apart
    >>> o = w.run(q, k_cache, v_cache, selected_page_ids=ids)
    """

    def __init__(self, float_workspace_buffer=None, kv_layout="NHD", *, ctx=None):
        r"""Constructor of :class:`HsaDecodeWrapper`.

        Parameters
        ----------
        float_workspace_buffer : clattn.Tensor | clattn.Context | None
            Workspace (grown by the wrapper when too small), a Context, or None (default
            context).
        kv_layout : str
            ``"NHD"`` ([num_pages, page_size, num_kv_heads, head_dim]) or ``"HND"``.
        """
        if kv_layout not in ("NHD", "HND"):
            raise error(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
        self._init_wrapper(float_workspace_buffer, ctx)
        self._kv_layout = kv_layout
        self._sel = None



    def plan(self, kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, topk,
             selection_strategy="group", window_size=0, fuse_window=True, sm_scale=None, logits_soft_cap=None,
             q_data_type="float16", kv_data_type=None, o_data_type=None, *, block_tables=None, seq_lens=None,
             num_pages=None, num_candidates=0, max_splits=0, validate=True):
        r"""Plan HSA decode for one batch (one query token per request).

        Parameters
        ----------
        kv_indptr, kv_indices, kv_last_page_len : int32 arrays ``[B + 1]``, ``[kv_indptr[-1]]``, ``[B]``
            FlashInfer CSR of the paged cache (no ``kv_start_offset``: the window is HSA's
            own). All three None when ``block_tables`` is given.
        num_qo_heads, num_kv_heads, head_dim, page_size : int
            Shapes (``num_qo_heads % num_kv_heads == 0``; ``page_size >= 2``, a power of
            two up to 256).
        topk : int
            Pages kept per selection list (>= 1).
        selection_strategy : str
            ``"group"`` (one selection per KV head) or ``"head"`` (one per query head).
        window_size : int
            The last ``window_size`` tokens are attended densely and their pages are never
            candidates (SWA->HSA); 0 = none.
        fuse_window : bool
            True: :meth:`run` attends window and selection in one call (merged by their
            LSEs). False: only the selected pages' keys before the window; merge with a
            dense window decode yourself (``merge_state``).
        sm_scale : Optional[float]
            Selection and attention scale, default ``1 / sqrt(head_dim)``.
        logits_soft_cap : Optional[float]
            Attention scores ``cap * tanh(s / cap)`` when > 0 (selection unaffected).
        q_data_type, kv_data_type, o_data_type :
            float32 / float16 / bfloat16 (kv also fp8_e4m3 / fp8_e5m2); kv and o default to q's.
        block_tables : Optional int32 ``[B, max_pages]``, keyword
            Page-table form (with ``seq_lens`` ``[B]``) instead of the CSR.
        num_pages : Optional[int], keyword
            The cache's page count (ids outside it add nothing). Default: the largest
            planned page id + 1, planned again at a call whose cache holds more pages.
        num_candidates : int, keyword
            C > 0: :meth:`select` scores explicit candidates ``[B, C]`` (SGLang's
            ``cand_page_ids``) instead of each request's own pages.
        max_splits : int, keyword
            Decode parts per request (0 = planner's choice).
        validate : bool, keyword
            Run the O(pages) metadata validation.
        """
        if selection_strategy not in ("group", "head"):
            raise error(f"selection_strategy = {selection_strategy!r}, expected 'group' or 'head'")
        q_dt = dtype_name(q_data_type, "q_data_type")
        kv_dt = dtype_name(kv_data_type, "kv_data_type") or q_dt
        o_dt = dtype_name(o_data_type, "o_data_type") or q_dt
        ip, ind, last, bt_flat, sl, batch, max_pages, used = _metadata(kv_indptr, kv_indices, kv_last_page_len,
                                                                     "kv_last_page_len", block_tables, seq_lens)
        ids = bt_flat if bt_flat is not None else ind
        least, pages = _num_pages(used, None), _num_pages(used, num_pages)

        def make(o):
            return _clattn._hsa_plan(self._ctx, ip, ind, last, bt_flat, sl, max_pages, int(page_size),
                                     o["num_pages"], int(num_kv_heads), int(head_dim), self._kv_layout, kv_dt,
                                     int(num_qo_heads), int(topk), selection_strategy, int(window_size),
                                     bool(fuse_window), int(num_candidates), q_dt, o_dt, _opt_scale(sm_scale),
                                     _opt_cap(logits_soft_cap), int(max_splits), bool(validate))

        self._set_plan(make, dict(num_pages=pages))
        self._page_ids = self._ctx.to_device(ids if ids.size else np.zeros(1, np.int32), "i32")
        self._fixed_pages = num_pages is not None
        self._dims = dict(batch_size=batch, num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim=int(head_dim), page_size=int(page_size), num_pages=least, q_dtype=q_dt,
                          kv_dtype=kv_dt, o_dtype=o_dt, num_candidates=int(num_candidates))
        self._sel = None

    def _sel_shape(self):
        p = self._plan
        return (self._dims["batch_size"], p.num_sel_heads, p.topk)

    def _inputs(self, q, k_cache, v_cache):
        """q and the caches as checked tensors; plans again for a larger cache (num_pages)."""
        d, ctx = self._dims, self._ctx
        qshape = (d["batch_size"], d["num_qo_heads"], d["head_dim"])
        q = check(_arg(ctx, q, "q", qshape, d["q_dtype"]), "q", (d["q_dtype"],), qshape)
        k = _cache_arg(ctx, k_cache, "k_cache", self._kv_layout, d)
        v = _cache_arg(ctx, v_cache, "v_cache", self._kv_layout, d) if v_cache is not None else None
        n = _check_cache(k, v if v is not None else k, self._kv_layout, d)
        if not self._fixed_pages:
            self._use(num_pages=n)
        elif n < self._opts["num_pages"]:
            raise error(f"k_cache: {n} pages, the plan's num_pages is {self._opts['num_pages']}")
        return q, k, v

    def _candidates(self, candidates, candidate_mask):
        d, ctx = self._dims, self._ctx
        C = d["num_candidates"]
        if C == 0:
            if candidates is not None or candidate_mask is not None:
                raise error("candidates given to a plan made without num_candidates")
            return None, None
        if candidates is None:
            raise error(f"candidates: required, the plan has num_candidates = {C}")
        shape = (d["batch_size"], C)
        cand = check(as_tensor(ctx, candidates, "candidates", "i32"), "candidates", ("i32",), shape)
        if candidate_mask is None:
            return cand, None
        if isinstance(candidate_mask, np.ndarray) and candidate_mask.dtype == bool:
            candidate_mask = candidate_mask.astype(np.uint8)
        mask = check(as_tensor(ctx, candidate_mask, "candidate_mask", "u8"), "candidate_mask", ("u8",), shape)
        return cand, mask

    def select(self, q, k_cache, *, candidates=None, candidate_mask=None, k_scale=None, out_page_ids=None,
               out_scores=None):
        r"""Top-k page selection only.

        Parameters
        ----------
        q : Tensor-like ``[batch_size, num_qo_heads, head_dim]``
        k_cache : Tensor-like, the paged K cache (landmarks at the pages' last slots)
        candidates : Optional int32 ``[batch_size, num_candidates]``
            Explicit candidate page ids (-1 padding), for a plan with ``num_candidates``.
        candidate_mask : Optional uint8 / bool ``[batch_size, num_candidates]``
            0 = not a candidate.
        k_scale : Optional[float]
            Dequantisation scale of an fp8 cache.
        out_page_ids, out_scores : Optional destinations (int32 / float32 ``[B, H_sel, topk]``).

        Returns
        -------
        (selected_page_ids, selected_scores)
            ``[batch_size, H_sel, topk]`` int32 physical page ids (-1 padded) and float32
            scores (-inf padded); ``H_sel`` = num_kv_heads (group) or num_qo_heads (head).
        """
        if self._plan is None:
            raise error("select() before plan()")
        ks = scale_value(k_scale, "k_scale")
        q, k, _ = self._inputs(q, k_cache, None)
        cand, mask = self._candidates(candidates, candidate_mask)
        ctx, shape = self._ctx, self._sel_shape()
        wb = Writeback()
        ids_t = self._dest(wb, out_page_ids, "out_page_ids", shape, "i32")
        sc_t = self._dest(wb, out_scores, "out_scores", shape, "f32")
        _clattn._hsa_call("select", ctx, self._plan, q, k, None, self._page_ids, ids_t, sc_t, cand, mask, None,
                          None, None, self._ws.get(self._plan.workspace_bytes), ks, 1.0)
        wb.done()
        return result(out_page_ids, ids_t), result(out_scores, sc_t)

    def _dest(self, wb, x, name, shape, dtype):
        if x is None:
            return self._ctx.empty(shape, dtype)
        return wb.track(x, name, lambda: check(_arg(self._ctx, x, name, shape, dtype), name, (dtype,), shape))

    def run(self, q, k_cache, v_cache=None, selected_page_ids=None, *, candidates=None, candidate_mask=None,
            k_scale=None, v_scale=None, out=None, lse=None, return_lse=False, sinks=None, return_lse_base_on_e=False):
        r"""Sparse decode: selection and attention in one call, or attention over a given
        selection.

        Parameters
        ----------
        q : Tensor-like ``[batch_size, num_qo_heads, head_dim]``
        k_cache, v_cache : Tensor-like paged caches; ``k_cache`` may also be a
            ``(k_cache, v_cache)`` tuple with ``v_cache`` None (the decode wrapper's form).
        selected_page_ids : Optional int32 ``[batch_size, H_sel, topk]``
            None: select first (as :meth:`select`, on the same queue, no host round trip).
            Given: attend to these pages (-1, ids outside the cache and repeats add
            nothing; a page in the window or the partial last page adds each key once).
        candidates, candidate_mask :
            Explicit candidates for the selection step (plans with ``num_candidates``).
        k_scale, v_scale : Optional[float]
            Dequantisation scales of an fp8 cache.
        out, lse : Optional destinations ``[B, num_qo_heads, head_dim]`` / ``[B, num_qo_heads]`` f32.
        return_lse : bool
            Also return the LSE (base 2 unless ``return_lse_base_on_e``); a head with no
            key has ``o = 0``, ``lse = -inf``.
        sinks : Optional float32 ``[num_qo_heads]``
            Attention-sink logits.

        Returns
        -------
        Tensor or (Tensor, Tensor)
            ``o`` (and ``lse`` when ``return_lse``).
        """
        if self._plan is None:
            raise error("run() before plan()")
        if v_cache is None:
            if not isinstance(k_cache, (tuple, list)) or len(k_cache) != 2:
                raise error("v_cache: required (or pass (k_cache, v_cache) as the second argument)")
            k_cache, v_cache = k_cache
        ks, vs = scale_value(k_scale, "k_scale"), scale_value(v_scale, "v_scale")
        q, k, v = self._inputs(q, k_cache, v_cache)
        ctx, d, shape = self._ctx, self._dims, self._sel_shape()
        oshape = (d["batch_size"], d["num_qo_heads"], d["head_dim"])
        if selected_page_ids is None:
            cand, mask = self._candidates(candidates, candidate_mask)
            if self._sel is None or tuple(self._sel.shape) != shape:
                self._sel = ctx.empty(shape, "i32")
            sel, mode = self._sel, "run"
        else:
            if candidates is not None or candidate_mask is not None:
                raise error("candidates given with selected_page_ids: the selection is already made")
            cand = mask = None
            sel = check(_arg(ctx, selected_page_ids, "selected_page_ids", shape, "i32"), "selected_page_ids",
                        ("i32",), shape)
            mode = "decode"
        if sinks is not None:
            sinks = check(as_tensor(ctx, sinks, "sinks", "f32"), "sinks", ("f32",), (d["num_qo_heads"],))
        wb = Writeback()
        o_t, lse_t = _outputs(ctx, wb, out, lse, return_lse, oshape, d["o_dtype"])
        _clattn._hsa_call(mode, ctx, self._plan, q, k, v, self._page_ids, sel, None, cand, mask, o_t, lse_t, sinks,
                          self._ws.get(self._plan.workspace_bytes), ks, vs)
        if not return_lse_base_on_e:
            rescale_lse(ctx, lse_t, LOG2E)
        wb.done()
        o_r = result(out, o_t)
        return (o_r, result(lse, lse_t)) if return_lse else o_r
