"""int8 KV caches (a scale per (token, KV head) in scale caches beside the pages) and
per-KV-head scales through the Python wrappers: append writes what the numpy quantiser
gives bit for bit, decode and paged prefill match the float64 reference over the
dequantised rows, bad arguments are refused naming the argument."""
import numpy as np
import pytest

import clattn
import ref

Hq, Hkv, D, P = 4, 2, 64, 16
quantize_int8 = ref.int8_quantize  # the contract's quantiser (docs/kv_formats.md "int8: layout")


def scale_shape(layout, n, p=P, h=Hkv):
    return (n, p, h) if layout == "NHD" else (n, h, p)


def cache_shape(layout, n):
    return (n, P, Hkv, D) if layout == "NHD" else (n, Hkv, P, D)


def dequantized(cache, scales, layout):
    """float64 K or V values of an int8 cache: stored * its row's scale."""
    return cache.astype(np.float64) * scales.astype(np.float64)[..., None]


def zero_caches(ctx, layout, scale_dtype, num_pages):
    """Zeroed int8 K/V caches and their scale caches."""
    kc, vc = ctx.zeros(cache_shape(layout, num_pages), "i8"), ctx.zeros(cache_shape(layout, num_pages), "i8")
    ksc = ctx.zeros(scale_shape(layout, num_pages), scale_dtype)
    vsc = ctx.zeros(scale_shape(layout, num_pages), scale_dtype)
    return kc, vc, ksc, vsc


def append_rows(ctx, rng, kv_lens, layout, scale_dtype, indptr, indices, last, num_pages):
    """Every request's rows appended through append_paged_kv_cache into fresh int8 caches:
    (k rows, v rows, (caches, scale caches), their slots)."""
    kc, vc, ksc, vsc = zero_caches(ctx, layout, scale_dtype, num_pages)
    nnz = sum(kv_lens)
    append_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    bi, pos = clattn.get_batch_indices_positions(append_indptr, np.array(kv_lens, np.int32), nnz)
    k_new = (rng.standard_normal((nnz, Hkv, D)) * rng.uniform(0.1, 4, (nnz, Hkv, 1))).astype(np.float32)
    v_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    k_new[0, 0] = 0  # an all-zero row: scale 0
    clattn.append_paged_kv_cache(k_new, v_new, bi, pos, (kc, vc), indices, indptr, last, layout,
                                 k_scale_cache=ksc, v_scale_cache=vsc)
    slots = indices[indptr[bi] + pos // P].astype(np.int64) * P + pos % P
    return k_new, v_new, (kc, vc, ksc, vsc), slots


def rows_at(cache, slots, layout):
    """The [len(slots), Hkv, ...] rows of a paged cache (or scale cache) at slots."""
    if layout == "HND":
        cache = np.moveaxis(cache, 1, 2)
    return cache.reshape((-1,) + cache.shape[2:])[slots]


@pytest.mark.parametrize("layout,scale_dtype", [("NHD", "f32"), ("HND", "f16")])
def test_int8_append_matches_quantizer(ctx, rng, layout, scale_dtype):
    kv_lens = [5, 19]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k_new, v_new, (kc, vc, ksc, vsc), slots = append_rows(ctx, rng, kv_lens, layout, scale_dtype, indptr, indices,
                                                          last, num_pages)
    for new, c, sc in ((k_new, kc, ksc), (v_new, vc, vsc)):
        want_q, want_s = quantize_int8(new, scale_dtype == "f16")
        assert c.dtype == "i8" and sc.dtype == scale_dtype
        np.testing.assert_array_equal(rows_at(c.numpy(), slots, layout), want_q)
        np.testing.assert_array_equal(rows_at(sc.numpy().astype(np.float32), slots, layout), want_s)


def test_int8_append_numpy_destinations(ctx, rng):
    """numpy int8 caches and f32 scale caches are written in place (page size 1: 3-D
    caches and [slots, heads] scale caches)."""
    n = 6
    k = rng.standard_normal((3, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((3, Hkv, D)).astype(np.float32)
    kc, vc = np.zeros((n, Hkv, D), np.int8), np.zeros((n, Hkv, D), np.int8)
    ksc, vsc = np.zeros((n, Hkv), np.float32), np.zeros((n, Hkv), np.float32)
    slots = np.array([4, -1, 1], np.int64)
    clattn.append_kv(k, v, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=vsc, ctx=ctx)
    for new, c, sc in ((k, kc, ksc), (v, vc, vsc)):
        q, s = quantize_int8(new, False)
        np.testing.assert_array_equal(c[[4, 1]], q[[0, 2]])
        np.testing.assert_array_equal(sc[[4, 1]], s[[0, 2]])
        assert not c[[0, 2, 3, 5]].any() and not sc[[0, 2, 3, 5]].any()


@pytest.mark.parametrize("layout,scale_dtype,splits", [("NHD", "f32", 0), ("HND", "f16", 4)])
def test_int8_decode(ctx, rng, layout, scale_dtype, splits):
    kv_lens = [1, 23, 70]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    _, _, (kc, vc, ksc, vsc), _ = append_rows(ctx, rng, kv_lens, layout, scale_dtype, indptr, indices, last,
                                              num_pages)
    kd = dequantized(kc.numpy(), ksc.numpy(), layout)
    vd = dequantized(vc.numpy(), vsc.numpy(), layout)
    q = rng.standard_normal((len(kv_lens), Hq, D)).astype(np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, layout)
    # The plan's scale dtype is f32; f16 scale caches plan again at run.
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type="int8", max_splits=splits)
    o, lse = w.run(q, (kc, vc), k_scale_cache=ksc, v_scale_cache=vsc, return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, rl = ref.attention(q[i:i + 1], ref.gather_pages(kd, sel, n, layout), ref.gather_pages(vd, sel, n, layout))
        np.testing.assert_allclose(o[i], ro[0], atol=2e-4, rtol=2e-4)
        np.testing.assert_allclose(lse[i], rl[0] * ref.LOG2E, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("layout,scale_dtype", [("NHD", "f16"), ("HND", "f32")])
def test_int8_paged_prefill(ctx, rng, layout, scale_dtype):
    kv_lens, qo_lens = [20, 7, 40], [5, 7, 1]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    _, _, (kc, vc, ksc, vsc), _ = append_rows(ctx, rng, kv_lens, layout, scale_dtype, indptr, indices, last,
                                              num_pages)
    kd = dequantized(kc.numpy(), ksc.numpy(), layout)
    vd = dequantized(vc.numpy(), vsc.numpy(), layout)
    q = rng.standard_normal((qo_indptr[-1], Hq, D)).astype(np.float32)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, layout)
    w.plan(qo_indptr, indptr, indices, last, Hq, Hkv, D, P, causal=True, q_data_type="float32",
           kv_data_type="int8", kv_scale_data_type=scale_dtype)
    o = w.run(q, (kc, vc), k_scale_cache=ksc, v_scale_cache=vsc).numpy()
    for i in range(3):
        sel = indices[indptr[i]:indptr[i + 1]]
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        ro, _ = ref.attention(q[rs], ref.gather_pages(kd, sel, kv_lens[i], layout),
                              ref.gather_pages(vd, sel, kv_lens[i], layout), causal=True)
        np.testing.assert_allclose(o[rs], ro, atol=2e-4, rtol=2e-4)


def test_int8_errors(ctx, rng):
    kv_lens = [9]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    kc, vc, ksc, vsc = zero_caches(ctx, "NHD", "f32", num_pages)
    k = rng.standard_normal((2, Hkv, D)).astype(np.float32)
    slots = np.array([0, 1], np.int64)
    with pytest.raises(clattn.Error, match="k_scale_cache: required"):
        clattn.append_kv(k, k, slots, kc, vc)
    with pytest.raises(clattn.Error, match="v_scale_cache: required"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ksc)
    with pytest.raises(clattn.Error, match=r"v_scale_cache: shape"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=ctx.zeros((num_pages, P, 3), "f32"))
    with pytest.raises(clattn.Error, match="k_scale_cache: dtype"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ctx.zeros(scale_shape("NHD", num_pages), "bf16"),
                         v_scale_cache=vsc)
    with pytest.raises(clattn.Error, match="v_scale_cache: dtype"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale_cache=ksc, v_scale_cache=ctx.zeros(ksc.shape, "f16"))
    with pytest.raises(clattn.Error, match="k_scale: an int8 cache"):
        clattn.append_kv(k, k, slots, kc, vc, k_scale=0.5, k_scale_cache=ksc, v_scale_cache=vsc)
    fc = ctx.zeros(cache_shape("NHD", num_pages), "f32")
    with pytest.raises(clattn.Error, match="k_scale_cache: the cache is f32"):
        clattn.append_kv(k, k, slots, fc, fc, k_scale_cache=ksc, v_scale_cache=vsc)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type="int8")
    q = np.zeros((1, Hq, D), np.float32)
    with pytest.raises(clattn.Error, match="k_scale_cache: required"):
        w.run(q, (kc, vc))
    with pytest.raises(clattn.Error, match="k_scale_cache: shape"):
        w.run(q, (kc, vc), k_scale_cache=ctx.zeros((num_pages, Hkv, P), "f32"), v_scale_cache=vsc)
    with pytest.raises(clattn.Error, match="v_scale: an int8 cache"):
        w.run(q, (kc, vc), k_scale_cache=ksc, v_scale_cache=vsc, v_scale=np.ones(Hkv, np.float32) * 2)
    with pytest.raises(clattn.Error, match="kv_data_type"):
        clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx).plan(np.array([0, 1], np.int32), np.array([0, 4], np.int32),
                                                               Hq, Hkv, D, kv_data_type="int8")


@pytest.mark.parametrize("kind", ["fp8_e4m3", "bf16"])
def test_per_head_scales(ctx, rng, kind):
    """k_scale / v_scale as [Hkv] arrays (vLLM's per-head form) through append and decode:
    stored = value / scale[head], loaded = stored * scale[head]."""
    kv_lens = [13, 30]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    ks_h = np.array([0.25, 2.0], np.float32)
    vs_h = ctx.to_device(np.array([0.5, 1.5], np.float32))  # a device tensor stays on the device
    kc, vc = ctx.zeros(cache_shape("NHD", num_pages), kind), ctx.zeros(cache_shape("NHD", num_pages), kind)
    nnz = sum(kv_lens)
    bi, pos = clattn.get_batch_indices_positions(np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32),
                                                 np.array(kv_lens, np.int32), nnz)
    k_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    v_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    clattn.append_paged_kv_cache(k_new, v_new, bi, pos, (kc, vc), indices, indptr, last, k_scale=ks_h, v_scale=vs_h)

    def load(c, s):
        bits = c.numpy()
        x = ref.fp8_to_float(bits, "e4m3") if kind == "fp8_e4m3" else clattn.bf16_to_float(bits).astype(np.float64)
        return x * np.asarray(s, np.float64)[None, None, :, None]

    kd, vd = load(kc, ks_h), load(vc, vs_h.numpy())
    slots = indices[indptr[bi] + pos // P].astype(np.int64) * P + pos % P
    tol = dict(rtol=0.07, atol=0.02) if kind == "fp8_e4m3" else dict(rtol=8e-3, atol=1e-3)
    np.testing.assert_allclose(kd.reshape(-1, Hkv, D)[slots], k_new, **tol)
    q = rng.standard_normal((2, Hq, D)).astype(np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type=kind)
    # One value on one side: it goes per head as well (the same value for every head).
    o = w.run(q, (kc, vc), k_scale=ks_h, v_scale=vs_h).numpy()
    o1 = w.run(q, (kc, vc), k_scale=ks_h, v_scale=1.0).numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, _ = ref.attention(q[i:i + 1], ref.gather_pages(kd, sel, n), ref.gather_pages(vd, sel, n))
        np.testing.assert_allclose(o[i], ro[0], atol=2e-3, rtol=2e-3)
        ro1, _ = ref.attention(q[i:i + 1], ref.gather_pages(kd, sel, n), ref.gather_pages(load(vc, [1, 1]), sel, n))
        np.testing.assert_allclose(o1[i], ro1[0], atol=2e-3, rtol=2e-3)
    with pytest.raises(clattn.Error, match=r"k_scale: shape \[3\]"):
        w.run(q, (kc, vc), k_scale=np.ones(3, np.float32))
    with pytest.raises(clattn.Error, match="v_scale: per-KV-head scales must be > 0"):
        w.run(q, (kc, vc), k_scale=ks_h, v_scale=np.array([1.0, 0.0]))
