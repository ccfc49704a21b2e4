import numpy as np
import pytest

import clattn
import ref

Hq, Hkv, D, P = 4, 2, 64, 16


def test_paged_prefill_causal(ctx, rng):
    kv_lens, qo_lens = [20, 7, 40], [5, 7, 1]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((qo_indptr[-1], Hq, D)).astype(np.float32)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, "NHD")
    w.plan(qo_indptr, indptr, indices, last, Hq, Hkv, D, P, causal=True, q_data_type="float32")
    o, lse = w.run(q, (ctx.to_device(k), ctx.to_device(v)), return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    for i in range(3):
        sel = indices[indptr[i]:indptr[i + 1]]
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        ro, rl = ref.attention(q[rs], ref.gather_pages(k, sel, kv_lens[i]), ref.gather_pages(v, sel, kv_lens[i]),
                               causal=True)
        np.testing.assert_allclose(o[rs], ro, atol=2e-3, rtol=2e-3)
        np.testing.assert_allclose(lse[rs], rl * ref.LOG2E, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("packed", [False, True])
def test_paged_prefill_custom_mask(ctx, rng, packed):
    kv_lens, qo_lens = [12, 9], [4, 3]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((qo_indptr[-1], Hq, D)).astype(np.float32)
    masks = [rng.random((ql, kl)) < 0.6 for ql, kl in zip(qo_lens, kv_lens)]
    for m in masks:
        m[:, 0] = True  # keep every row non-empty
    flat = np.concatenate([m.reshape(-1) for m in masks])
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx)
    kw = {}
    if packed:
        kw["packed_custom_mask"] = np.concatenate([np.packbits(m.reshape(-1), bitorder="little") for m in masks])
    else:
        kw["custom_mask"] = flat
    w.plan(qo_indptr, indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", **kw)
    o = w.run(q, (k, v)).numpy()
    for i in range(2):
        sel = indices[indptr[i]:indptr[i + 1]]
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        ro, _ = ref.attention(q[rs], ref.gather_pages(k, sel, kv_lens[i]), ref.gather_pages(v, sel, kv_lens[i]),
                              mask=masks[i])
        np.testing.assert_allclose(o[rs], ro, atol=2e-3, rtol=2e-3)


def test_ragged_prefill(ctx, rng):
    qo_lens, kv_lens = [3, 8, 1], [10, 8, 5]
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    kv_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    q = rng.standard_normal((qo_indptr[-1], Hq, D)).astype(np.float16)
    k = rng.standard_normal((kv_indptr[-1], Hkv, D)).astype(np.float16)
    v = rng.standard_normal((kv_indptr[-1], Hkv, D)).astype(np.float16)
    w = clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx, "NHD")
    w.plan(qo_indptr, kv_indptr, Hq, Hkv, D, causal=True, q_data_type="float16", window_left=4)
    o = w.run(ctx.to_device(q), ctx.to_device(k), ctx.to_device(v)).numpy()
    for i in range(3):
        rs, ks = slice(qo_indptr[i], qo_indptr[i + 1]), slice(kv_indptr[i], kv_indptr[i + 1])
        ro, _ = ref.attention(q[rs], k[ks], v[ks], causal=True, window_left=4)
        np.testing.assert_allclose(o[rs].astype(np.float64), ro, atol=2e-2, rtol=2e-2)


def test_prefill_errors(ctx, rng):
    w = clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx)
    with pytest.raises(clattn.Error, match="head_dim_vo"):
        w.plan([0, 1], [0, 1], Hq, Hkv, D, head_dim_vo=128)
    with pytest.raises(clattn.Error, match="custom_mask"):
        w.plan([0, 2], [0, 3], Hq, Hkv, D, custom_mask=np.ones(5, bool), q_data_type="float32")
    with pytest.raises(clattn.Error):
        w.plan([0, 4], [0, 3], Hq, Hkv, D, causal=True, q_data_type="float32")  # qo_len > kv_len
    w.plan([0, 2], [0, 3], Hq, Hkv, D, q_data_type="float32")
    with pytest.raises(clattn.Error, match="k: shape"):
        w.run(np.zeros((2, Hq, D), np.float32), np.zeros((2, Hkv, D), np.float32), np.zeros((3, Hkv, D), np.float32))
