import numpy as np
import pytest

import clattn
import ref


def _decode_case(ctx, rng, kv_lens, Hq=4, Hkv=2, D=64, P=16, dtype=np.float32, layout="NHD", **opts):
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    shape = (num_pages, P, Hkv, D) if layout == "NHD" else (num_pages, Hkv, P, D)
    k = rng.standard_normal(shape).astype(dtype)
    v = rng.standard_normal(shape).astype(dtype)
    q = rng.standard_normal((len(kv_lens), Hq, D)).astype(dtype)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, layout)
    dt = "float32" if dtype == np.float32 else "float16"
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type=dt, kv_data_type=dt, **opts)
    o, lse = w.run(ctx.to_device(q), (ctx.to_device(k), ctx.to_device(v)), return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    assert o.shape == (len(kv_lens), Hq, D) and o.dtype == dtype
    for i, n in enumerate(kv_lens):
        kk = ref.gather_pages(k, indices[indptr[i]:indptr[i + 1]], n, layout)
        vv = ref.gather_pages(v, indices[indptr[i]:indptr[i + 1]], n, layout)
        ro, rl = ref.attention(q[i:i + 1], kk, vv, sm_scale=opts.get("sm_scale"), causal=True,
                               window_left=opts.get("window_left", -1), soft_cap=opts.get("logits_soft_cap") or 0.0)
        tol = 2e-3 if dtype == np.float32 else 2e-2
        np.testing.assert_allclose(o[i], ro[0], atol=tol, rtol=tol)
        np.testing.assert_allclose(lse[i], rl[0] * ref.LOG2E, atol=tol, rtol=tol)
    return w


def test_decode_f32(ctx, rng):
    w = _decode_case(ctx, rng, [1, 20, 37])
    assert isinstance(w.run.__doc__, str)


def test_decode_f16_window_softcap_scale(ctx, rng):
    _decode_case(ctx, rng, [5, 33, 64], dtype=np.float16, window_left=8, logits_soft_cap=5.0, sm_scale=0.2)


def test_decode_hnd_split(ctx, rng):
    _decode_case(ctx, rng, [300, 2], layout="HND", max_splits=4)


def test_decode_out_and_reuse_across_layers(ctx, rng):
    kv_lens, Hq, Hkv, D, P = [9, 17], 4, 2, 64, 16
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32")
    out = ctx.empty((2, Hq, D), "f32")
    for layer in range(2):
        k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
        v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
        q = rng.standard_normal((2, Hq, D)).astype(np.float32)
        o = w.run(q, (k, v), out=out)
        assert o is out
        got = o.numpy()
        for i, n in enumerate(kv_lens):
            sel = indices[indptr[i]:indptr[i + 1]]
            ro, _ = ref.attention(q[i:i + 1], ref.gather_pages(k, sel, n), ref.gather_pages(v, sel, n))
            np.testing.assert_allclose(got[i], ro[0], atol=2e-3, rtol=2e-3)


def test_decode_bf16_bits(ctx, rng):
    kv_lens, Hq, Hkv, D, P = [12], 2, 1, 64, 16
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k = clattn.bf16_to_float(clattn.float_to_bf16(rng.standard_normal((num_pages, P, Hkv, D))))
    v = clattn.bf16_to_float(clattn.float_to_bf16(rng.standard_normal((num_pages, P, Hkv, D))))
    q = clattn.bf16_to_float(clattn.float_to_bf16(rng.standard_normal((1, Hq, D))))
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="bfloat16", kv_data_type="bf16")
    o = w.run(ctx.to_device(clattn.float_to_bf16(q), "bf16"),
              (ctx.to_device(clattn.float_to_bf16(k), "bf16"), clattn.float_to_bf16(v)))
    assert o.dtype == "bf16"
    got = clattn.bf16_to_float(o)
    ro, _ = ref.attention(q, ref.gather_pages(k, indices, 12), ref.gather_pages(v, indices, 12))
    np.testing.assert_allclose(got, ro, atol=2e-2, rtol=2e-2)


def test_decode_errors(ctx, rng):
    indptr, indices, last, num_pages = ref.make_csr(rng, [4, 5], 16)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    with pytest.raises(clattn.Error, match="before plan"):
        w.run(np.zeros((2, 4, 64), np.float32), (np.zeros(1), np.zeros(1)))
    with pytest.raises(clattn.Error, match="pos_encoding_mode"):
        w.plan(indptr, indices, last, 4, 2, 64, 16, pos_encoding_mode="ROPE_LLAMA")
    bad_last = last.copy()
    bad_last[1] = 0
    with pytest.raises(clattn.Error, match="last_page_len") as ei:
        w.plan(indptr, indices, bad_last, 4, 2, 64, 16, q_data_type="float32")
    assert ei.value.status == "invalid argument" and ei.value.status_code == 1
    w.plan(indptr, indices, last, 4, 2, 64, 16, q_data_type="float32")
    cache = np.zeros((num_pages, 16, 2, 64), np.float32)
    with pytest.raises(clattn.Error, match="q: dtype"):
        w.run(np.zeros((2, 4, 64), np.float16), (cache, cache))
    with pytest.raises(clattn.Error, match="q: shape"):
        w.run(np.zeros((3, 4, 64), np.float32), (cache, cache))
    with pytest.raises(clattn.Error, match="k_cache: shape"):
        w.run(np.zeros((2, 4, 64), np.float32), (cache[:, :8], cache[:, :8]))
    with pytest.raises(clattn.Error, match="tuple"):
        w.run(np.zeros((2, 4, 64), np.float32), cache)
    with pytest.raises(clattn.Error, match="pages"):
        w.run(np.zeros((2, 4, 64), np.float32), (cache[:1], cache[:1]))
    with pytest.raises(clattn.Error, match="bf16"):
        w.run(np.zeros((2, 4, 64), np.uint16), (cache, cache))


@pytest.mark.parametrize("kind", ["fp8_e4m3", "fp8_e5m2"])
def test_decode_fp8_cache_via_append(ctx, rng, kind):
    """append_kv quantises f32 rows into an fp8 cache (value / scale); decode reads it back
    with the same scales. The reference decodes the stored bits itself."""
    kv_lens, Hq, Hkv, D, P, scale = [21, 6], 4, 2, 64, 16, 0.5
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k_cache, v_cache = ctx.zeros((num_pages, P, Hkv, D), kind), ctx.zeros((num_pages, P, Hkv, D), kind)
    bi, pos = clattn.get_batch_indices_positions(np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32),
                                                 np.array(kv_lens, np.int32), sum(kv_lens))
    k_new = rng.standard_normal((sum(kv_lens), Hkv, D)).astype(np.float32)
    v_new = rng.standard_normal((sum(kv_lens), Hkv, D)).astype(np.float32)
    slots = indices[indptr[bi] + pos // P].astype(np.int64) * P + pos % P
    clattn.append_kv(k_new, v_new, slots, k_cache, v_cache, k_scale=scale, v_scale=scale)
    kc = ref.fp8_to_float(k_cache.numpy(), kind[4:]) * scale
    vc = ref.fp8_to_float(v_cache.numpy(), kind[4:]) * scale
    np.testing.assert_allclose(kc.reshape(-1, Hkv, D)[slots], k_new, rtol=0.13, atol=0.02)  # fp8 rounding
    q = rng.standard_normal((2, Hq, D)).astype(np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type=kind)
    o = w.run(q, (k_cache, v_cache), k_scale=scale, v_scale=scale).numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, _ = ref.attention(q[i:i + 1], ref.gather_pages(kc, sel, n), ref.gather_pages(vc, sel, n))
        np.testing.assert_allclose(o[i], ro[0], atol=2e-3, rtol=2e-3)
