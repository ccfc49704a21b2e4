"""numpy arrays given as destinations are written in place (copied to the device, written
back after the op), and host objects that cannot take the result are rejected by name."""
import numpy as np
import pytest

import clattn
import ref
from test_mla_linear import _lin_inputs


def _decode_setup(ctx, rng, kv_lens=(7, 20), Hq=4, Hkv=2, D=64, P=16):
    indptr, indices, last, num_pages = ref.make_csr(rng, list(kv_lens), P)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((len(kv_lens), Hq, D)).astype(np.float32)
    ro, rl = [], []
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        o1, l1 = ref.attention(q[i:i + 1], ref.gather_pages(k, sel, n), ref.gather_pages(v, sel, n))
        ro.append(o1[0]), rl.append(l1[0])
    return (indptr, indices, last, Hq, Hkv, D, P), q, k, v, np.stack(ro), np.stack(rl) * ref.LOG2E


def test_decode_run_numpy_out_and_lse(ctx, rng):
    meta, q, k, v, ro, rl = _decode_setup(ctx, rng)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(*meta, q_data_type="float32")
    out, lse = np.zeros_like(ro, np.float32), np.zeros(rl.shape, np.float32)
    got_o, got_l = w.run(q, (k, v), out=out, lse=lse, return_lse=True)
    assert got_o is out and got_l is lse
    np.testing.assert_allclose(out, ro, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse, rl, atol=2e-3, rtol=2e-3)
    lse2 = np.zeros(rl.shape, np.float32)
    w.run(q, (k, v), lse=lse2)  # an lse buffer without return_lse is written too
    np.testing.assert_allclose(lse2, rl, atol=2e-3, rtol=2e-3)


def test_prefill_run_numpy_out_and_lse(ctx, rng):
    P, Hq, Hkv, D = 16, 4, 2, 64
    kv_lens, qo_lens = [9, 18], [3, 2]
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    qo = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((qo[-1], Hq, D)).astype(np.float32)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx)
    w.plan(qo, indptr, indices, last, Hq, Hkv, D, P, causal=True, q_data_type="float32")
    out, lse = np.zeros((qo[-1], Hq, D), np.float32), np.zeros((qo[-1], Hq), np.float32)
    w.run(q, (k, v), out=out, lse=lse)
    rw = clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx)
    kv_indptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    rw.plan(qo, kv_indptr, Hq, Hkv, D, causal=True, q_data_type="float32")
    kr = np.concatenate([ref.gather_pages(k, indices[indptr[i]:indptr[i + 1]], n) for i, n in enumerate(kv_lens)])
    vr = np.concatenate([ref.gather_pages(v, indices[indptr[i]:indptr[i + 1]], n) for i, n in enumerate(kv_lens)])
    out_r = np.zeros_like(out)
    assert rw.run(q, kr.astype(np.float32), vr.astype(np.float32), out=out_r) is out_r
    for i in range(2):
        a, b, c0, c1 = qo[i], qo[i + 1], kv_indptr[i], kv_indptr[i + 1]
        r_o, r_l = ref.attention(q[a:b], kr[c0:c1], vr[c0:c1], causal=True)
        np.testing.assert_allclose(out[a:b], r_o, atol=2e-3, rtol=2e-3)
        np.testing.assert_allclose(out_r[a:b], r_o, atol=2e-3, rtol=2e-3)
        np.testing.assert_allclose(lse[a:b], r_l * ref.LOG2E, atol=2e-3, rtol=2e-3)


def test_merge_state_numpy_outputs_and_in_place(ctx, rng):
    T, H, D = 3, 2, 64
    va, vb = rng.standard_normal((2, T, H, D)).astype(np.float32)
    sa, sb = rng.standard_normal((2, T, H)).astype(np.float32)
    ro, rs = ref.merge(va, sa, vb, sb)
    out, s_out = np.zeros_like(va), np.zeros_like(sa)
    got = clattn.merge_state(va, sa, vb, sb, out=out, s_out=s_out, ctx=ctx)
    assert got[0] is out and got[1] is s_out
    np.testing.assert_allclose(out, ro, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(s_out, rs, atol=1e-5, rtol=1e-5)
    v, s = va.copy(), sa.copy()
    clattn.merge_state_in_place(v, s, vb, sb, ctx=ctx)
    np.testing.assert_allclose(v, ro, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(s, rs, atol=1e-5, rtol=1e-5)


def test_merge_states_numpy_outputs(ctx, rng):
    T, N, H, D = 2, 3, 2, 64
    v = rng.standard_normal((T, N, H, D)).astype(np.float32)
    s = rng.standard_normal((T, N, H)).astype(np.float32)
    ro, rs = v[:, 0].astype(np.float64), s[:, 0].astype(np.float64)
    for i in range(1, N):
        ro, rs = ref.merge(ro, rs, v[:, i], s[:, i])
    out, s_out = np.zeros((T, H, D), np.float32), np.zeros((T, H), np.float32)
    clattn.merge_states(v, s, out=out, s_out=s_out, ctx=ctx)
    np.testing.assert_allclose(out, ro, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(s_out, rs, atol=1e-4, rtol=1e-4)


def test_append_kv_into_numpy_cache(ctx, rng):
    P, Hkv, D = 16, 2, 64
    k_cache, v_cache = np.zeros((4, P, Hkv, D), np.float32), np.zeros((4, P, Hkv, D), np.float32)
    k = rng.standard_normal((2, Hkv, D)).astype(np.float32)
    clattn.append_kv(k, 2 * k, np.array([5, 63]), k_cache, v_cache, ctx=ctx)
    np.testing.assert_array_equal(k_cache[0, 5], k[0])
    np.testing.assert_array_equal(v_cache[3, 15], 2 * k[1])
    assert np.count_nonzero(k_cache) == 2 * Hkv * D
    # FlashInfer's form, into a numpy (k, v) pair
    kc, vc = np.zeros((2, P, Hkv, D), np.float32), np.zeros((2, P, Hkv, D), np.float32)
    bi, pos = np.array([0], np.int32), np.array([3], np.int32)
    clattn.append_paged_kv_cache(k[:1], k[:1], bi, pos, (kc, vc), np.array([1], np.int32), np.array([0, 1], np.int32),
                                 np.array([4], np.int32), ctx=ctx)
    np.testing.assert_array_equal(kc[1, 3], k[0])
    np.testing.assert_array_equal(vc[1, 3], k[0])


def test_linear_numpy_out_and_state_pool(ctx, rng):
    q, k, v, g, beta = _lin_inputs(rng, 1, 5)
    out = np.zeros((1, 5, 2, 64), np.float32)
    got, _ = clattn.chunk_gated_delta_rule(q, k, v, g, beta, out=out, ctx=ctx)
    assert got is out
    ro, _ = ref.linear("gdn", q[0], k[0], v[0], g[0], beta[0], 1 / 8, np.zeros((2, 64, 64)))
    np.testing.assert_allclose(out[0], ro, atol=2e-3, rtol=2e-3)
    pool0 = rng.standard_normal((2, 2, 64, 64)).astype(np.float32) * 0.1
    pool = pool0.copy()
    q, k, v, g, beta = _lin_inputs(rng, 1, 1)
    clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                   initial_state_indices=np.array([1]), ctx=ctx)
    _, expect = ref.linear("gdn", q[0], k[0], v[0], g[0], beta[0], 1 / 8, pool0[1])
    np.testing.assert_allclose(pool[1], expect, atol=2e-3, rtol=2e-3)
    np.testing.assert_array_equal(pool[0], pool0[0])
    before = pool.copy()
    clattn.fused_recurrent_simple_gla_update(q, k, v, g=g, initial_state_source=pool,
                                             initial_state_indices=np.array([0]), ctx=ctx)
    _, expect = ref.linear("gla", q[0], k[0], v[0], g[0], None, 1 / 8, before[0])
    np.testing.assert_allclose(pool[0], expect, atol=2e-3, rtol=2e-3)


def test_unwritable_destinations_are_rejected(ctx, rng):
    meta, q, k, v, ro, rl = _decode_setup(ctx, rng)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(*meta, q_data_type="float32")
    with pytest.raises(clattn.Error, match="^out: a list cannot be written in place"):
        w.run(q, (k, v), out=ro.astype(np.float32).tolist())
    ro_arr = np.zeros_like(ro, np.float32)
    ro_arr.flags.writeable = False
    with pytest.raises(clattn.Error, match="^out: the numpy array is read-only"):
        w.run(q, (k, v), out=ro_arr)
    T, H, D = 2, 2, 64
    va = rng.standard_normal((T, H, D)).astype(np.float32)
    sa = np.zeros((T, H), np.float32)
    with pytest.raises(clattn.Error, match="^s_out: "):
        clattn.merge_state(va, sa, va, sa, s_out=np.zeros((T, H), np.float16), ctx=ctx)
    pool = np.zeros((2, 2, 64, 64), np.float32)
    pool.flags.writeable = False
    q, k, v, g, beta = _lin_inputs(rng, 1, 1)
    with pytest.raises(clattn.Error, match="^initial_state_source: the numpy array is read-only"):
        clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                       initial_state_indices=[0], ctx=ctx)
    with pytest.raises(clattn.Error, match="^k_cache: a tuple cannot be written in place"):
        clattn.append_kv(k[0, :1, :1], k[0, :1, :1], [0], tuple(np.zeros((1, 1, 1, 64), np.float32)),
                         np.zeros((1, 1, 1, 64), np.float32), ctx=ctx)
