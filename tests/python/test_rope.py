"""apply_rope_pos_ids(_inplace), apply_rope_with_cos_sin_cache(_inplace) and
rope_append_paged_kv_cache against a float64 numpy rotation written here from
include/clattn/rope.hpp: pair i < R/2 is dims (i, i + R/2) (NeoX) or (2i, 2i + 1) (GPT-J,
interleave=True), (x, y) -> (x cos - y sin, y cos + x sin), angle pos / scale *
theta^(-2i/R) or the cos_sin_cache row (R/2 cosines, then the sines); dims R .. D-1 pass
through unchanged.

The theta form computes the angle in f32 on the device (docs/rope.md): its error grows with
the position (about 3e-7 rad per position unit), so the tolerances below scale with the
largest position. Inputs are uniform in [-1, 1]."""
import inspect

import numpy as np
import pytest

import clattn
import ref

# FlashInfer's signatures (flashinfer/rope.py): the parameters that may be passed
# positionally, in order.
FI_POS_IDS = ["q", "k", "pos_ids", "rotary_dim", "interleave", "rope_scale", "rope_theta"]
FI_COS_SIN = ["positions", "query", "key", "head_size", "cos_sin_cache", "is_neox"]


def _positional(fn):
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds]


@pytest.mark.parametrize("fn, names", [
    (clattn.apply_rope_pos_ids, FI_POS_IDS),
    (clattn.apply_rope_pos_ids_inplace, FI_POS_IDS),
    (clattn.apply_rope_with_cos_sin_cache, FI_COS_SIN),
    (clattn.apply_rope_with_cos_sin_cache_inplace, FI_COS_SIN),
])
def test_positional_order_is_flashinfers(fn, names):
    assert _positional(fn) == names


def rope_ref(x, pos, R, interleave, theta=1e4, scale=1.0, cos_sin=None):
    """x [T, H, D] rotated at pos [T] in float64."""
    x = np.asarray(x, np.float64)
    out = x.copy()
    i = np.arange(R // 2)
    if cos_sin is None:
        ang = np.asarray(pos, np.float64)[:, None] / scale * theta ** (-2.0 * i / R)
        c, s = np.cos(ang), np.sin(ang)
    else:
        rows = np.asarray(cos_sin, np.float64)[np.asarray(pos)]
        c, s = rows[:, :R // 2], rows[:, R // 2:]
    a, b = (2 * i, 2 * i + 1) if interleave else (i, i + R // 2)
    xa, xb = x[:, :, a], x[:, :, b]
    out[:, :, a] = xa * c[:, None, :] - xb * s[:, None, :]
    out[:, :, b] = xb * c[:, None, :] + xa * s[:, None, :]
    return out


def angle_tol(pos, scale=1.0):
    """Bound on a rotated value's error from the f32 angle (|x| <= 1, a pair's norm <= sqrt 2)."""
    return 1.5 * 3e-7 * float(np.max(pos)) / scale + 2e-6


def cos_sin_cache(rows, R, theta=1e4, factor=0.7):
    """A cache of a scaled schedule (any numbers do: the kernel reads them as they are)."""
    i = np.arange(R // 2)
    ang = np.arange(rows)[:, None] * factor * theta ** (-2.0 * i / R) + 0.01 * i
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


def _data(rng, T, H, D, dtype):
    x = rng.uniform(-1, 1, (T, H, D)).astype(np.float32)
    if dtype == "bf16":
        bits = clattn.float_to_bf16(x)
        return bits, clattn.bf16_to_float(bits)
    return x, x


def _read(t, dtype):
    a = t.numpy() if isinstance(t, clattn.Tensor) else np.asarray(t)
    return clattn.bf16_to_float(a) if dtype == "bf16" else a.astype(np.float32)


def _close(got, want, tol, dtype):
    rtol = 2.0 ** -8 if dtype == "bf16" else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=tol)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("interleave", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 32])
def test_apply_rope_pos_ids(ctx, rng, dtype, interleave, rotary_dim):
    T, Hq, Hk, D = 7, 4, 2, 64
    R = rotary_dim or D
    q, qv = _data(rng, T, Hq, D, dtype)
    k, kv = _data(rng, T, Hk, D, dtype)
    pos = rng.integers(0, 500, T).astype(np.int32 if interleave else np.int64)
    theta, scale = (5e5, 4.0) if interleave else (1e4, 1.0)
    q_rope, k_rope = clattn.apply_rope_pos_ids(ctx.to_device(q, dtype), ctx.to_device(k, dtype), pos, rotary_dim,
                                               interleave, scale, theta)
    assert q_rope.shape == (T, Hq, D) and k_rope.shape == (T, Hk, D) and q_rope.dtype == dtype
    got_q, got_k = _read(q_rope, dtype), _read(k_rope, dtype)
    tol = angle_tol(pos, scale)
    _close(got_q, rope_ref(qv, pos, R, interleave, theta, scale), tol, dtype)
    _close(got_k, rope_ref(kv, pos, R, interleave, theta, scale), tol, dtype)
    # Dims past the rotary dim are copied bit for bit.
    np.testing.assert_array_equal(got_q[:, :, R:], qv[:, :, R:])


def test_apply_rope_pos_ids_inplace(ctx, rng):
    T, Hq, Hk, D = 5, 2, 1, 64
    q, _ = _data(rng, T, Hq, D, "f32")
    k, _ = _data(rng, T, Hk, D, "f32")
    pos = rng.integers(0, 300, T)
    want_q, want_k = rope_ref(q, pos, D, False), rope_ref(k, pos, D, False)
    # numpy arrays are written back in place
    qn, kn = q.copy(), k.copy()
    assert clattn.apply_rope_pos_ids_inplace(qn, kn, pos) is None
    np.testing.assert_allclose(qn, want_q, atol=angle_tol(pos))
    np.testing.assert_allclose(kn, want_k, atol=angle_tol(pos))
    # device tensors are rotated in their own buffers (pos_ids on the device, not validated)
    qt, kt = ctx.to_device(q), ctx.to_device(k)
    clattn.apply_rope_pos_ids_inplace(qt, kt, ctx.to_device(pos.astype(np.int32)), validate=False)
    np.testing.assert_allclose(qt.numpy(), want_q, atol=angle_tol(pos))
    np.testing.assert_allclose(kt.numpy(), want_k, atol=angle_tol(pos))
    # keys only: q None
    q_rope, k_rope = clattn.apply_rope_pos_ids(None, k, pos)
    assert q_rope is None
    np.testing.assert_allclose(k_rope.numpy(), want_k, atol=angle_tol(pos))


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("flat", [True, False])
def test_apply_rope_with_cos_sin_cache(ctx, rng, is_neox, flat):
    T, Hq, Hk, D, R, rows = 6, 4, 2, 64, 48, 1000  # partial rotary: R is the cache's width
    cache = cos_sin_cache(rows, R)
    q, _ = _data(rng, T, Hq, D, "f32")
    k, _ = _data(rng, T, Hk, D, "f32")
    pos = rng.integers(0, rows, T)
    pos[0] = rows - 1
    query = q.reshape(T, Hq * D) if flat else q
    key = k.reshape(T, Hk * D) if flat else k
    q_out, k_out = clattn.apply_rope_with_cos_sin_cache(pos, query, key, D, cache, is_neox)
    assert q_out.shape == query.shape and k_out.shape == key.shape
    want_q = rope_ref(q, pos, R, not is_neox, cos_sin=cache)
    want_k = rope_ref(k, pos, R, not is_neox, cos_sin=cache)
    np.testing.assert_allclose(q_out.numpy().reshape(T, Hq, D), want_q, atol=2e-6)
    np.testing.assert_allclose(k_out.numpy().reshape(T, Hk, D), want_k, atol=2e-6)
    # in place, on device tensors; key None rotates the queries only
    qt = ctx.to_device(query)
    clattn.apply_rope_with_cos_sin_cache_inplace(ctx.to_device(pos), qt, None, D, ctx.to_device(cache), is_neox)
    np.testing.assert_allclose(qt.numpy().reshape(T, Hq, D), want_q, atol=2e-6)


def _slot_rows(cache, slot, layout):
    P = cache.shape[1] if layout == "NHD" else cache.shape[2]
    return cache[slot // P, slot % P] if layout == "NHD" else cache[slot // P, :, slot % P]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("interleave", [False, True])
def test_rope_append_paged_kv_cache_slots(ctx, rng, layout, kv, interleave):
    T, Hq, Hkv, D, P, pages = 5, 4, 2, 64, 4, 6
    q, _ = _data(rng, T, Hq, D, "f32")
    k, _ = _data(rng, T, Hkv, D, "f32")
    v, _ = _data(rng, T, Hkv, D, "f32")
    pos = rng.integers(0, 400, T)
    slots = np.array([9, -1, 0, 23, 4], np.int64)  # token 1 is padding: q rotated, cache untouched
    shape = (pages, P, Hkv, D) if layout == "NHD" else (pages, Hkv, P, D)
    k_cache, v_cache = ctx.zeros(shape, kv), ctx.zeros(shape, kv)
    q_rope = clattn.rope_append_paged_kv_cache(q, k, v, pos, (k_cache, v_cache), slots, kv_layout=layout,
                                               interleave=interleave)
    tol = angle_tol(pos) + (2.0 ** -11 if kv == "f16" else 0.0)
    np.testing.assert_allclose(q_rope.numpy(), rope_ref(q, pos, D, interleave), atol=angle_tol(pos))
    want_k = rope_ref(k, pos, D, interleave)
    kc, vc = k_cache.numpy().astype(np.float64), v_cache.numpy()
    written = np.zeros(shape, bool)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        np.testing.assert_allclose(_slot_rows(kc, s, layout), want_k[t], atol=tol)
        np.testing.assert_array_equal(_slot_rows(vc, s, layout), v[t].astype(vc.dtype))
        _slot_rows(written, s, layout)[...] = True
    assert not kc[~written].any() and not vc[~written].any()


def test_rope_append_paged_kv_cache_flashinfer_metadata(ctx, rng):
    """FlashInfer's append metadata (as append_paged_kv_cache; positions default to pos_ids),
    a cos/sin cache, an fp8 cache with scales, q_out in another dtype."""
    P, Hq, Hkv, D, rows = 16, 4, 2, 64, 64
    seq_lens = np.array([5, 20], np.int32)
    append_lens = np.array([2, 17], np.int32)
    indptr, indices, last, num_pages = ref.make_csr(rng, list(seq_lens), P)
    append_indptr = np.concatenate([[0], np.cumsum(append_lens)]).astype(np.int32)
    nnz = int(append_indptr[-1])
    bi, positions = clattn.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    q, _ = _data(rng, nnz, Hq, D, "f32")
    k, _ = _data(rng, nnz, Hkv, D, "f32")
    v, _ = _data(rng, nnz, Hkv, D, "f32")
    cache = cos_sin_cache(rows, D)
    shape = (num_pages, P, Hkv, D)
    k_cache, v_cache = ctx.zeros(shape, "fp8_e4m3"), ctx.zeros(shape, "fp8_e4m3")
    k_scale, v_scale = 0.5, 0.25
    q_out = ctx.empty((nnz, Hq, D), "bf16")
    got = clattn.rope_append_paged_kv_cache(q, k, v, positions, (k_cache, v_cache), batch_indices=bi,
                                            kv_indices=indices, kv_indptr=indptr, kv_last_page_len=last,
                                            cos_sin_cache=cache, k_scale=k_scale, v_scale=v_scale, q_out=q_out)
    assert got is q_out
    np.testing.assert_allclose(clattn.bf16_to_float(q_out.numpy()), rope_ref(q, positions, D, False, cos_sin=cache),
                               rtol=2.0 ** -8, atol=2e-6)
    want_k = rope_ref(k, positions, D, False, cos_sin=cache)
    kc, vc = k_cache.numpy(), v_cache.numpy()
    for t in range(nnz):
        page = indices[indptr[bi[t]] + positions[t] // P]
        # e4m3 keeps 3 mantissa bits: a relative rounding error of 2^-4 at most
        np.testing.assert_allclose(ref.fp8_to_float(kc[page, positions[t] % P]) * k_scale, want_k[t],
                                   rtol=2.0 ** -4, atol=2e-3)
        np.testing.assert_allclose(ref.fp8_to_float(vc[page, positions[t] % P]) * v_scale, v[t],
                                   rtol=2.0 ** -4, atol=2e-3)


@pytest.mark.parametrize("kv,layout,interleave", [("fp8_e4m3", "NHD", False), ("f32", "HND", True)])
def test_rope_append_per_head_scales_equal_rope_then_append(ctx, rng, kv, layout, interleave):
    """Per-KV-head k_scale / v_scale ([num_kv_heads]: a numpy array, an f32 device tensor) store
    exactly what apply_rope_pos_ids then append_kv store with the same scales (head 0's k scale
    small enough to saturate e4m3); loaded = stored * scale[head] is the rotated row."""
    T, Hq, Hkv, D, P, pages, R = 6, 4, 2, 64, 4, 4, 48
    q, _ = _data(rng, T, Hq, D, "f32")
    k, _ = _data(rng, T, Hkv, D, "f32")
    v, _ = _data(rng, T, Hkv, D, "f32")
    k *= 3
    pos = rng.integers(0, 300, T)
    slots = np.array([5, -1, 0, 13, 2, 7], np.int64)
    shape = (pages, P, Hkv, D) if layout == "NHD" else (pages, Hkv, P, D)
    k_scale = np.array([1.0 / 256, 1.5], np.float32)
    v_scale = ctx.to_device(np.array([0.75, 2.0], np.float32))
    kc, vc = ctx.zeros(shape, kv), ctx.zeros(shape, kv)
    q_out = clattn.rope_append_paged_kv_cache(q, k, v, pos, (kc, vc), slots, kv_layout=layout, rotary_dim=R,
                                              interleave=interleave, k_scale=k_scale, v_scale=v_scale)
    q_rot, k_rot = clattn.apply_rope_pos_ids(q, k, pos, rotary_dim=R, interleave=interleave)
    kc2, vc2 = ctx.zeros(shape, kv), ctx.zeros(shape, kv)
    clattn.append_kv(k_rot, v, slots, kc2, vc2, layout, k_scale=k_scale, v_scale=v_scale)
    np.testing.assert_array_equal(q_out.numpy(), q_rot.numpy())
    np.testing.assert_array_equal(kc.numpy(), kc2.numpy(), err_msg="k_cache")
    np.testing.assert_array_equal(vc.numpy(), vc2.numpy(), err_msg="v_cache")
    load = ref.fp8_to_float if kv == "fp8_e4m3" else (lambda x: x.astype(np.float64))
    want_k = rope_ref(k, pos, R, interleave)
    vs = v_scale.numpy()
    for t, s in enumerate(slots):
        if s < 0:
            continue
        gk, gv = load(_slot_rows(kc.numpy(), s, layout)), load(_slot_rows(vc.numpy(), s, layout))
        if kv == "f32":
            np.testing.assert_allclose(gk * k_scale[:, None], want_k[t], rtol=1e-6, atol=angle_tol(pos))
            np.testing.assert_allclose(gv * vs[:, None], v[t], rtol=1e-6)
        else:  # e4m3: 3 mantissa bits; head 0's k rows saturate at 448
            np.testing.assert_allclose(gk[1] * k_scale[1], want_k[t][1], rtol=2.0 ** -4, atol=2e-3)
            assert (np.abs(gk[0]) == 448).any()
            np.testing.assert_allclose(gv * vs[:, None], v[t], rtol=2.0 ** -4, atol=2e-3)


def test_rope_append_in_place_q(ctx, rng):
    T, Hq, Hkv, D = 3, 2, 1, 64
    q, _ = _data(rng, T, Hq, D, "f32")
    k, _ = _data(rng, T, Hkv, D, "f32")
    pos = np.array([1, 2, 3])
    qt = ctx.to_device(q)
    # numpy caches of page size 1 (the 3-D form) are written back in place
    k_cache, v_cache = np.zeros((T, Hkv, D), np.float32), np.zeros((T, Hkv, D), np.float32)
    out = clattn.rope_append_paged_kv_cache(qt, k, k, pos, (k_cache, v_cache), np.arange(T), q_out=qt)
    assert out is qt
    np.testing.assert_allclose(qt.numpy(), rope_ref(q, pos, D, False), atol=angle_tol(pos))
    np.testing.assert_allclose(k_cache, rope_ref(k, pos, D, False), atol=angle_tol(pos))
    np.testing.assert_array_equal(v_cache, k)


def test_rope_errors(ctx, rng):
    T, H, D = 3, 2, 64
    q, _ = _data(rng, T, H, D, "f32")
    pos = np.array([0, 5, 9])
    with pytest.raises(clattn.Error, match="rotary_dim = 7"):
        clattn.apply_rope_pos_ids(q, q, pos, rotary_dim=7)
    with pytest.raises(clattn.Error, match="rope.theta"):
        clattn.apply_rope_pos_ids(q, q, pos, rope_theta=0.0)
    with pytest.raises(clattn.Error, match=r"positions\[1\] = -5"):
        clattn.apply_rope_pos_ids(q, q, np.array([0, -5, 9]))
    with pytest.raises(clattn.Error, match="pos_ids: shape"):
        clattn.apply_rope_pos_ids(q, q, pos[:2])
    with pytest.raises(clattn.Error, match="k: dtype"):
        clattn.apply_rope_pos_ids(q, q.astype(np.float16), pos)
    cache = cos_sin_cache(8, 32)
    with pytest.raises(clattn.Error, match="query: shape"):
        clattn.apply_rope_with_cos_sin_cache(pos, q.reshape(T, H * D), None, 48, cache)
    with pytest.raises(clattn.Error, match=r"positions\[2\] = 9, outside the cos_sin_cache's 8 rows"):
        clattn.apply_rope_with_cos_sin_cache(pos, q, None, D, cache)
    # rejected in-place calls leave the caller's arrays as they were
    qn = q.copy()
    with pytest.raises(clattn.Error, match="rotary_dim"):
        clattn.apply_rope_pos_ids_inplace(qn, qn, pos, rotary_dim=66)
    np.testing.assert_array_equal(qn, q)

    k_cache, v_cache = ctx.zeros((4, 4, H, D), "f32"), ctx.zeros((4, 4, H, D), "f32")
    slots = np.array([0, 1, 2])
    with pytest.raises(clattn.Error, match="cos_sin_cache: shape"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), slots, rotary_dim=16,
                                          cos_sin_cache=cos_sin_cache(16, 32))
    with pytest.raises(clattn.Error, match="slot"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), np.array([0, 1, 16]))
    with pytest.raises(clattn.Error, match=r"positions\[0\] = -1"):
        clattn.rope_append_paged_kv_cache(q, q, q, np.array([-1, 0, 0]), (k_cache, v_cache), slots)
    with pytest.raises(clattn.Error, match="one form"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), slots, batch_indices=[0, 0, 0])
    with pytest.raises(clattn.Error, match="slot_mapping, or batch_indices"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache))
    with pytest.raises(clattn.Error, match="q: shape"):
        clattn.rope_append_paged_kv_cache(q[:2], q, q, pos, (k_cache, v_cache), slots)
    # per-KV-head scales: [num_kv_heads] values > 0
    with pytest.raises(clattn.Error, match=r"k_scale: per-KV-head scales must be > 0"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), slots, k_scale=np.array([0.5, 0.0]))
    with pytest.raises(clattn.Error, match=r"v_scale: shape \[3\]: expected one value or \[2\]"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), slots, v_scale=np.ones(3))
    with pytest.raises(clattn.Error, match="k_scale: shape"):
        clattn.rope_append_paged_kv_cache(q, q, q, pos, (k_cache, v_cache), slots, k_scale=ctx.zeros((3,), "f32"))
    assert not k_cache.numpy().any() and not v_cache.numpy().any()  # nothing written by a rejected call
