"""int4 KV caches (uint8 tensors of nibble pairs, a [scale, zero] pair per group of
quant_group head-dim elements in scale caches beside the pages) through the Python wrappers:
append writes what the numpy quantiser gives bit for bit, decode and paged prefill match the
float64 reference over the dequantised rows, bad arguments are refused naming the argument."""
import numpy as np
import pytest

import clattn
import ref

Hq, Hkv, D, P = 4, 2, 64, 16


def quantize_int4(x, G, f16_scale):
    """docs/kv_formats.md "int4: layout": per group of G, lo = min(min x, 0), hi = max(max x,
    0), scale = (hi - lo) * fl(1/15) (f32, then f16), zero = nearest(-lo / scale) and u =
    nearest(x / scale) + zero, each clamped to [0, 15] (ties to even); scale 0: zero 0, u 0.
    Returns (u [..., D] uint8, pairs [..., D / G, 2] float32)."""
    x = np.asarray(x, np.float32)
    g = x.reshape(x.shape[:-1] + (-1, G))
    lo = np.minimum(g.min(axis=-1), np.float32(0))
    hi = np.maximum(g.max(axis=-1), np.float32(0))
    s = (hi - lo).astype(np.float32) * np.float32(1.0 / 15.0)
    if f16_scale:
        s = s.astype(np.float16).astype(np.float32)
    s64 = s.astype(np.float64)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.rint(-lo.astype(np.float64)[..., None] / s64)
        z = np.where(s64 > 0, np.clip(z, 0, 15), 0)
        u = np.where(s64 > 0, np.clip(np.rint(g.astype(np.float64) / s64) + z, 0, 15), 0)
    pairs = np.stack([s, z[..., 0].astype(np.float32)], axis=-1)
    return u.reshape(x.shape).astype(np.uint8), pairs


def pack(u):
    """Nibble codes [..., D] -> bytes [..., D / 2], element 2i in the low nibble of byte i."""
    return (u[..., 0::2] | (u[..., 1::2] << 4)).astype(np.uint8)


def unpack(b):
    u = np.empty(b.shape[:-1] + (2 * b.shape[-1],), np.uint8)
    u[..., 0::2], u[..., 1::2] = b & 15, b >> 4
    return u


def dequantized(cache, pairs, G):
    """float64 K or V values of an int4 cache: (u - zero) * scale per group."""
    u = unpack(cache).astype(np.float64)
    g = u.reshape(u.shape[:-1] + (-1, G))
    p = pairs.astype(np.float64)
    return ((g - p[..., 1:2]) * p[..., 0:1]).reshape(u.shape)


def cache_shape(layout, n):
    return (n, P, Hkv, D // 2) if layout == "NHD" else (n, Hkv, P, D // 2)


def scale_shape(layout, n, G):
    return ((n, P, Hkv) if layout == "NHD" else (n, Hkv, P)) + (D // G, 2)


def rows_at(cache, slots, layout):
    """The [len(slots), Hkv, ...] rows of a paged cache (or scale cache) at slots."""
    if layout == "HND":
        cache = np.moveaxis(cache, 1, 2)
    return cache.reshape((-1,) + cache.shape[2:])[slots]


def append_rows(ctx, rng, kv_lens, layout, scale_dtype, G, indptr, indices, last, num_pages):
    """Every request's rows appended through append_paged_kv_cache into fresh int4 caches:
    (k rows, v rows, (caches, scale caches), their slots)."""
    kc, vc = ctx.zeros(cache_shape(layout, num_pages), "u8"), ctx.zeros(cache_shape(layout, num_pages), "u8")
    ksc = ctx.zeros(scale_shape(layout, num_pages, G), scale_dtype)
    vsc = ctx.zeros(scale_shape(layout, num_pages, G), scale_dtype)
    nnz = sum(kv_lens)
    append_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    bi, pos = clattn.get_batch_indices_positions(append_indptr, np.array(kv_lens, np.int32), nnz)
    k_new = (rng.standard_normal((nnz, Hkv, D)) * rng.uniform(0.1, 4, (nnz, Hkv, 1))).astype(np.float32)
    v_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    k_new[0, 0] = 0  # all-zero groups: scale 0
    v_new[0, 0] = np.abs(v_new[0, 0])  # positive-only groups: zero 0
    clattn.append_paged_kv_cache(k_new, v_new, bi, pos, (kc, vc), indices, indptr, last, layout,
                                 k_scale_cache=ksc, v_scale_cache=vsc, kv_data_type="int4", quant_group=G)
    slots = indices[indptr[bi] + pos // P].astype(np.int64) * P + pos % P
    return k_new, v_new, (kc, vc, ksc, vsc), slots


@pytest.mark.parametrize("layout,scale_dtype,G", [("NHD", "f32", 32), ("HND", "f16", 64)])
def test_int4_append_matches_quantizer(ctx, rng, layout, scale_dtype, G):
    kv_lens = [5, 19]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k_new, v_new, (kc, vc, ksc, vsc), slots = append_rows(ctx, rng, kv_lens, layout, scale_dtype, G, indptr,
                                                          indices, last, num_pages)
    for new, c, sc in ((k_new, kc, ksc), (v_new, vc, vsc)):
        want_u, want_p = quantize_int4(new, G, scale_dtype == "f16")
        assert c.dtype == "u8" and sc.dtype == scale_dtype
        np.testing.assert_array_equal(rows_at(c.numpy(), slots, layout), pack(want_u))
        np.testing.assert_array_equal(rows_at(sc.numpy().astype(np.float32), slots, layout), want_p)
    assert (rows_at(ksc.numpy(), slots, layout)[0, 0] == 0).all()  # the zero row's pairs


def test_int4_append_numpy_destinations(ctx, rng):
    """numpy uint8 caches and f32 scale caches are written in place (page size 1: 3-D caches
    and [slots, heads, groups, 2] scale caches; the default group, 64)."""
    n = 6
    k = rng.standard_normal((3, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((3, Hkv, D)).astype(np.float32)
    kc, vc = np.zeros((n, Hkv, D // 2), np.uint8), np.zeros((n, Hkv, D // 2), np.uint8)
    ksc, vsc = np.zeros((n, Hkv, 1, 2), np.float32), np.zeros((n, Hkv, 1, 2), np.float32)
    slots = np.array([4, -1, 1], np.int64)
    clattn.append_kv(k, v, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=vsc, kv_data_type="int4", ctx=ctx)
    for new, c, sc in ((k, kc, ksc), (v, vc, vsc)):
        u, p = quantize_int4(new, 64, False)
        np.testing.assert_array_equal(c[[4, 1]], pack(u)[[0, 2]])
        np.testing.assert_array_equal(sc[[4, 1]], p[[0, 2]])
        assert not c[[0, 2, 3, 5]].any() and not sc[[0, 2, 3, 5]].any()


@pytest.mark.parametrize("layout,scale_dtype,G,splits", [("NHD", "f32", 32, 0), ("HND", "f16", 64, 4)])
def test_int4_decode(ctx, rng, layout, scale_dtype, G, splits):
    kv_lens = [1, 23, 70]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    _, _, (kc, vc, ksc, vsc), _ = append_rows(ctx, rng, kv_lens, layout, scale_dtype, G, indptr, indices, last,
                                              num_pages)
    kd = dequantized(kc.numpy(), ksc.numpy(), G)
    vd = dequantized(vc.numpy(), vsc.numpy(), G)
    q = rng.standard_normal((len(kv_lens), Hq, D)).astype(np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, layout)
    # The plan's scale dtype is f32; f16 scale caches plan again at run.
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type="int4", max_splits=splits,
           quant_group=G)
    o, lse = w.run(q, (kc, vc), k_scale_cache=ksc, v_scale_cache=vsc, return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, rl = ref.attention(q[i:i + 1], ref.gather_pages(kd, sel, n, layout), ref.gather_pages(vd, sel, n, layout))
        np.testing.assert_allclose(o[i], ro[0], atol=2e-4, rtol=2e-4)
        np.testing.assert_allclose(lse[i], rl[0] * ref.LOG2E, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("layout,scale_dtype,G", [("NHD", "f16", 64), ("HND", "f32", 32)])
def test_int4_paged_prefill(ctx, rng, layout, scale_dtype, G):
    """Causal paged prefill over int4 caches (the extend op reads int4)."""
    kv_lens, qo_lens = [20, 7, 40], [5, 7, 1]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    _, _, (kc, vc, ksc, vsc), _ = append_rows(ctx, rng, kv_lens, layout, scale_dtype, G, indptr, indices, last,
                                              num_pages)
    kd = dequantized(kc.numpy(), ksc.numpy(), G)
    vd = dequantized(vc.numpy(), vsc.numpy(), G)
    q = rng.standard_normal((qo_indptr[-1], Hq, D)).astype(np.float32)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, layout)
    w.plan(qo_indptr, indptr, indices, last, Hq, Hkv, D, P, causal=True, q_data_type="float32",
           kv_data_type="int4", kv_scale_data_type=scale_dtype, quant_group=G)
    o = w.run(q, (kc, vc), k_scale_cache=ksc, v_scale_cache=vsc).numpy()
    for i in range(3):
        sel = indices[indptr[i]:indptr[i + 1]]
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        ro, _ = ref.attention(q[rs], ref.gather_pages(kd, sel, kv_lens[i], layout),
                              ref.gather_pages(vd, sel, kv_lens[i], layout), causal=True)
        np.testing.assert_allclose(o[rs], ro, atol=2e-4, rtol=2e-4)


def test_int4_errors(ctx, rng):
    kv_lens = [9]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    kc, vc = ctx.zeros(cache_shape("NHD", num_pages), "u8"), ctx.zeros(cache_shape("NHD", num_pages), "u8")
    ksc, vsc = ctx.zeros(scale_shape("NHD", num_pages, 32), "f32"), ctx.zeros(scale_shape("NHD", num_pages, 32), "f32")
    k = rng.standard_normal((2, Hkv, D)).astype(np.float32)
    slots = np.array([0, 1], np.int64)
    for g in (48, 16, 128, 0):  # not 32 / 64 / 128, or not dividing head_dim 64
        with pytest.raises(clattn.Error, match=f"quant_group={g}: int4 takes 32, 64 or 128"):
            clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=vsc, kv_data_type="int4",
                             quant_group=g)
        with pytest.raises(clattn.Error, match=f"quant_group={g}"):
            clattn.BatchDecodeWithPagedKVCacheWrapper(ctx).plan(indptr, indices, last, Hq, Hkv, D, P,
                                                                q_data_type="float32", kv_data_type="int4",
                                                                quant_group=g)
    with pytest.raises(clattn.Error, match="quant_group=32: only int4"):
        clattn.BatchDecodeWithPagedKVCacheWrapper(ctx).plan(indptr, indices, last, Hq, Hkv, D, P,
                                                            q_data_type="float32", kv_data_type="int8", quant_group=32)
    with pytest.raises(clattn.Error, match="k_scale_cache: required with an int4 cache"):
        clattn.append_kv(k, k, slots, kc, vc, kv_data_type="int4", quant_group=32)
    with pytest.raises(clattn.Error, match=r"v_scale_cache: shape"):  # the default group (64) expects one pair
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ctx.zeros(scale_shape("NHD", num_pages, 64), "f32"),
                         v_scale_cache=vsc, kv_data_type="int4")
    with pytest.raises(clattn.Error, match="k_scale: an int4 cache"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale=0.5, k_scale_cache=ksc, v_scale_cache=vsc, kv_data_type="int4",
                         quant_group=32)
    with pytest.raises(clattn.Error, match="kv_data_type='int4'"):  # a uint8 cache without its dtype
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=vsc)
    with pytest.raises(clattn.Error, match="k_cache: dtype i8; an int4 cache is uint8"):
        i8 = ctx.zeros((num_pages, P, Hkv, D), "i8")
        clattn.append_kv(k, k, slots, i8, i8, k_scale_cache=ksc, v_scale_cache=vsc, kv_data_type="int4",
                         quant_group=32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type="int4", quant_group=32)
    q = np.zeros((1, Hq, D), np.float32)
    with pytest.raises(clattn.Error, match="k_scale_cache: required with an int4 cache"):
        w.run(q, (kc, vc))
    with pytest.raises(clattn.Error, match="k_scale_cache: shape"):
        w.run(q, (kc, vc), k_scale_cache=ctx.zeros((num_pages, P, Hkv), "f32"), v_scale_cache=vsc)
    with pytest.raises(clattn.Error, match="head_dim // 2"):  # a cache of D bytes a row
        full = ctx.zeros((num_pages, P, Hkv, D), "u8")
        w.run(q, (full, full), k_scale_cache=ksc, v_scale_cache=vsc)
    with pytest.raises(clattn.Error, match="kv_data_type"):
        clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx).plan(np.array([0, 1], np.int32), np.array([0, 4], np.int32),
                                                               Hq, Hkv, D, kv_data_type="int4")
