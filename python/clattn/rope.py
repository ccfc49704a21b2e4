"""FlashInfer-shaped rotary position embedding (``flashinfer.rope``): apply_rope_pos_ids and
its in-place form, apply_rope_with_cos_sin_cache (vLLM's / FlashInfer's signature) and its
in-place form, and rope_append_paged_kv_cache, RoPE fused into the KV append (one kernel).
Semantics: docs/rope.md; differences from FlashInfer: docs/python.md."""
import numpy as np

from . import _clattn
from ._kv_quant import kv_scales, quant_group_of
from ._util import Writeback, as_tensor, check, context_of, error, host_i32, host_ints, result
from .attention import (_FLOAT_IO, _append_cache, _append_kv_dtype, _append_scale_caches, _append_slots,
                        _split_kv_cache)


def _host_positions(x, validate):
    """The host int64 copy of the positions the library checks before enqueueing (device
    arrays are copied back), or None when not validating."""
    return host_ints(x, "pos_ids") if validate else None


def _rotary_dim(rotary_dim):
    if rotary_dim is None:
        return 0
    if int(rotary_dim) != rotary_dim or int(rotary_dim) <= 0:
        raise error(f"rotary_dim = {rotary_dim!r}, must be a positive even integer (None = head_dim)")
    return int(rotary_dim)


def _apply(c, qt, q_out, kt, k_out, pos_ids, validate, rotary_dim, interleave, theta, scale, cache):
    pos = as_tensor(c, pos_ids, "pos_ids")
    _clattn._apply_rope(c, qt, q_out, kt, k_out, pos, _host_positions(pos_ids, validate), rotary_dim,
                        bool(interleave), float(theta), float(scale), cache)


def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4, *,
                       validate=True, dtype=None, ctx=None):
    r"""Apply rotary embedding to a batch of queries and keys at the given positions
    (FlashInfer's ``apply_rope_pos_ids``).

    Parameters
    ----------
    q : Tensor-like, shape ``[nnz, num_q_heads, head_dim]`` (f32, f16, bf16)
    k : Tensor-like, shape ``[nnz, num_k_heads, head_dim]``, q's dtype
        (clattn extension: either q or k may be None; its result is then None)
    pos_ids : Tensor-like int32/int64 ``[nnz]``
        The position of each token (``>= 0``).
    rotary_dim : Optional[int]
        Rotate the first ``rotary_dim`` dims (even); the rest pass through. None = head_dim.
    interleave : bool
        False: NeoX ``rotate_half`` pairs ``(i, i + R/2)``; True: GPT-J pairs ``(2i, 2i + 1)``.
    rope_scale : float
        Positions are divided by it (linear scaling).
    rope_theta : float
        The base: angle ``i`` is ``pos / rope_scale * rope_theta^(-2i / R)``, computed in f32.
    validate : bool
        clattn extension: check every position on the host first (copies pos_ids back when
        it lives on the device).
    dtype : optional
        dtype of q/k when they are uint16 bf16 bit patterns (``"bf16"``).

    Returns
    -------
    (q_rope, k_rope) : Tensors of q's and k's shapes and dtype.
    """
    c = context_of(q, k, pos_ids, ctx=ctx)
    qt = as_tensor(c, q, "q", dtype)
    kt = as_tensor(c, k, "k", dtype)
    q_out = c.empty(qt.shape, qt.dtype) if qt is not None else None
    k_out = c.empty(kt.shape, kt.dtype) if kt is not None else None
    _apply(c, qt, q_out, kt, k_out, pos_ids, validate, _rotary_dim(rotary_dim), interleave, rope_theta, rope_scale,
           None)
    return q_out, k_out


def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4, *,
                               validate=True, dtype=None, ctx=None):
    r""":func:`apply_rope_pos_ids` writing the rotated rows back into ``q`` and ``k``
    (device buffers in place; numpy arrays are copied to the device and the result written
    back into them)."""
    c = context_of(q, k, pos_ids, ctx=ctx)
    wb = Writeback()
    qt = wb.track(q, "q", lambda: as_tensor(c, q, "q", dtype)) if q is not None else None
    kt = wb.track(k, "k", lambda: as_tensor(c, k, "k", dtype)) if k is not None else None
    _apply(c, qt, qt, kt, kt, pos_ids, validate, _rotary_dim(rotary_dim), interleave, rope_theta, rope_scale, None)
    wb.done()


def _heads(t, name, head_size):
    """A ``[T, H * D]`` or ``[T, H, D]`` tensor as ``[T, H, D]``."""
    s = tuple(t.shape)
    if len(s) == 2 and head_size > 0 and s[1] % head_size == 0:
        return t.view((s[0], s[1] // head_size, head_size))
    if len(s) == 3 and s[2] == head_size:
        return t
    raise error(f"{name}: shape {list(s)}, expected [num_tokens, num_heads * {head_size}] or "
                f"[num_tokens, num_heads, {head_size}] (head_size = {head_size})")


def _cos_sin_cache(c, cos_sin_cache):
    cache = as_tensor(c, cos_sin_cache, "cos_sin_cache", "f32")
    return check(cache, "cos_sin_cache", ("f32",), (None, None))


def _apply_cached(c, positions, qt, q_out, kt, k_out, head_size, cos_sin_cache, is_neox, validate):
    head_size = int(head_size)
    q3 = _heads(qt, "query", head_size)
    k3 = _heads(kt, "key", head_size) if kt is not None else None
    _apply(c, q3, q_out.view(q3.shape), k3, k_out.view(k3.shape) if k3 is not None else None, positions, validate,
           0, not is_neox, 1e4, 1.0, _cos_sin_cache(c, cos_sin_cache))


def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox=True, *, validate=True,
                                  dtype=None, ctx=None):
    r"""Apply rotary embedding with angles read from a cos/sin cache (FlashInfer's
    ``apply_rope_with_cos_sin_cache``, vLLM's ``rotary_embedding``): any scaling (Llama-3's
    frequency bands, YaRN, NTK) is the caller's when it fills the cache.

    Parameters
    ----------
    positions : Tensor-like int32/int64 ``[nnz]``
        The row of the cache each token reads (``0 <= p < max_positions``).
    query : Tensor-like ``[nnz, num_q_heads * head_size]`` or ``[nnz, num_q_heads, head_size]``
    key : Tensor-like ``[nnz, num_k_heads * head_size]`` (or 3-D), query's dtype; None = queries only
    head_size : int
    cos_sin_cache : Tensor-like float32 ``[max_positions, rotary_dim]``
        Row ``p`` holds the ``rotary_dim / 2`` cosines, then the sines; its width is the
        rotary dim (dims past it pass through).
    is_neox : bool
        True: NeoX ``rotate_half`` pairs; False: GPT-J interleaved pairs.
    validate, dtype :
        As :func:`apply_rope_pos_ids`.

    Returns
    -------
    (query_out, key_out) : Tensors of query's and key's shapes (key_out None without key).
    """
    c = context_of(query, key, positions, cos_sin_cache, ctx=ctx)
    qt = as_tensor(c, query, "query", dtype)
    kt = as_tensor(c, key, "key", dtype) if key is not None else None
    q_out = c.empty(qt.shape, qt.dtype)
    k_out = c.empty(kt.shape, kt.dtype) if kt is not None else None
    _apply_cached(c, positions, qt, q_out, kt, k_out, head_size, cos_sin_cache, is_neox, validate)
    return q_out, k_out


def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True, *,
                                          validate=True, dtype=None, ctx=None):
    r""":func:`apply_rope_with_cos_sin_cache` writing back into ``query`` and ``key`` (device
    buffers in place; numpy arrays written back after the call)."""
    c = context_of(query, key, positions, cos_sin_cache, ctx=ctx)
    wb = Writeback()
    qt = wb.track(query, "query", lambda: as_tensor(c, query, "query", dtype))
    kt = wb.track(key, "key", lambda: as_tensor(c, key, "key", dtype)) if key is not None else None
    _apply_cached(c, positions, qt, qt, kt, kt, head_size, cos_sin_cache, is_neox, validate)
    wb.done()


def rope_append_paged_kv_cache(q, k, v, pos_ids, paged_kv_cache, slot_mapping=None, *, batch_indices=None,
                               positions=None, kv_indices=None, kv_indptr=None, kv_last_page_len=None,
                               kv_layout="NHD", rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4,
                               cos_sin_cache=None, k_scale=None, v_scale=None, k_scale_cache=None,
                               v_scale_cache=None, kv_data_type=None, quant_group=None, q_out=None, q_out_dtype=None,
                               validate=True, dtype=None, ctx=None):
    r"""RoPE on q and k, then k and v appended to the paged cache, in one kernel (FlashInfer's
    ``rope_quantize_fp8_append_paged_kv_cache`` without the rope/nope split; vLLM's
    ``rotary_embedding`` + ``reshape_and_cache``).

    Parameters
    ----------
    q : Tensor-like ``[nnz, num_qo_heads, head_dim]`` (k's dtype), or None (keys only)
    k, v : Tensor-like ``[nnz, num_kv_heads, head_dim]`` (f32, f16, bf16)
        k is rotated, then stored as :func:`append_kv` stores it (``value / k_scale``, round
        to nearest even, fp8 saturating; int8 and int4 caches quantise the rotated row, their
        scales going to the scale caches); v is stored as :func:`append_kv` stores it.
    pos_ids : Tensor-like int32/int64 ``[nnz]``
        The RoPE position of each token.
    paged_kv_cache : Tuple[Tensor, Tensor]
        ``(k_cache, v_cache)`` in ``kv_layout`` (3-D ``[slots, heads, dim]`` = page size 1).
    slot_mapping : Tensor-like int32/int64 ``[nnz]``
        Cache slot of each token (page ``s // page_size``, offset ``s % page_size``);
        negative slots skip the cache writes (padding), the token's q row is still rotated.
    batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len :
        Instead of slot_mapping: FlashInfer's append metadata, as
        :func:`append_paged_kv_cache` takes it (positions default to pos_ids;
        kv_last_page_len is not needed).
    rotary_dim, interleave, rope_scale, rope_theta :
        As :func:`apply_rope_pos_ids`.
    cos_sin_cache : Optional[Tensor-like] float32 ``[max_positions, rotary_dim]``
        As :func:`apply_rope_with_cos_sin_cache` (rope_scale / rope_theta then unused;
        ``interleave`` still picks the pairs: ``is_neox = not interleave``).
    k_scale, v_scale : Optional[float or Tensor-like]
        Quantisation scales of a float or fp8 cache (default 1): one value, or ``[num_kv_heads]``
        values (per-KV-head scales, as :func:`append_kv` takes them: ``stored = value /
        scale[head]``). Only None or 1 with an int8 or int4 cache.
    k_scale_cache, v_scale_cache, kv_data_type, quant_group :
        As :func:`append_paged_kv_cache`: an int8 or int4 cache's scale caches (required
        there), ``kv_data_type="int4"`` for int4 caches (uint8 nibble pairs, ``[...,
        head_dim // 2]``) and their group (32, 64 (default) or 128). The rotated k row and
        the v row are quantised as :func:`append_kv` quantises rows: the cache holds what
        :func:`apply_rope_pos_ids` followed by :func:`append_paged_kv_cache` stores.
    q_out : Optional[Tensor-like]
        Where the rotated q goes (``[nnz, num_qo_heads, head_dim]``; may be ``q`` itself);
        allocated in ``q_out_dtype`` (default q's dtype) when None.
    validate : bool
        Check every slot and position on the host first (device arrays are copied back).
    dtype : optional
        dtype of q/k/v when they are uint16 bf16 bit patterns (``"bf16"``).

    Returns
    -------
    q_rope : Tensor (or the numpy ``q_out`` written in place); None when q is None.
    """
    k_cache, v_cache = _split_kv_cache(paged_kv_cache)
    c = context_of(q, k, v, k_cache, v_cache, ctx=ctx)
    flashinfer_meta = (batch_indices, positions, kv_indices, kv_indptr)
    if slot_mapping is None:
        if batch_indices is None or kv_indices is None or kv_indptr is None:
            raise error("rope_append_paged_kv_cache: pass slot_mapping, or batch_indices, kv_indices and kv_indptr "
                        "(FlashInfer's append metadata)")
        slot_mapping = _append_slots(c, k_cache, kv_layout, batch_indices, pos_ids if positions is None else positions,
                                     kv_indices, kv_indptr)
    elif any(x is not None for x in flashinfer_meta):
        raise error("rope_append_paged_kv_cache: slot_mapping given with batch_indices/positions/kv_indices/"
                    "kv_indptr: pass one form")
    kt = as_tensor(c, k, "append_key", dtype)
    vt = as_tensor(c, v, "append_value", dtype or kt.dtype)
    qt = as_tensor(c, q, "q", dtype or kt.dtype) if q is not None else None
    sl = as_tensor(c, slot_mapping, "slot_mapping")
    slots_host = host_i32(slot_mapping, "slot_mapping") if validate else None
    pos = as_tensor(c, pos_ids, "pos_ids")
    wb = Writeback()
    qo = None
    if qt is not None:
        if q_out is None:
            qo = c.empty(qt.shape, q_out_dtype or qt.dtype)
        else:
            qo = wb.track(q_out, "q_out", lambda: check(as_tensor(c, q_out, "q_out", q_out_dtype), "q_out", _FLOAT_IO,
                                                        tuple(qt.shape)))
    elif q_out is not None:
        raise error("q_out given without q")
    kc = _append_cache(c, k_cache, "k_cache", kv_layout, wb)
    vc = _append_cache(c, v_cache, "v_cache", kv_layout, wb)
    kv_dt = _append_kv_dtype(kc, kv_data_type)
    heads, head_dim = (kt.shape[1], kt.shape[2]) if len(kt.shape) == 3 else (0, 0)
    group = quant_group_of(kv_dt, quant_group, head_dim)
    ks, vs, kh, vh = kv_scales(c, k_scale, v_scale, heads, kv_dt)
    ksc, vsc = _append_scale_caches(c, kc, k_scale_cache, v_scale_cache, kv_layout, wb, kv_dt,
                                    head_dim // group if group else 0)
    cache = _cos_sin_cache(c, cos_sin_cache) if cos_sin_cache is not None else None
    _clattn._rope_append_kv(c, qt, qo, kt, vt, sl, kc, vc, kv_layout, ks, vs, slots_host, pos,
                            _host_positions(pos_ids, validate), _rotary_dim(rotary_dim), bool(interleave),
                            float(rope_theta), float(rope_scale), cache, ksc, vsc, kh, vh,
                            "i4" if kv_dt == "i4" else "", group)
    wb.done()
    return result(q_out, qo) if qo is not None else None
