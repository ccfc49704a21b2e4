import numpy as np
import pytest

import clattn
import ref


@pytest.mark.parametrize("qo_lens", [[1, 1, 1], [3, 1, 4]])
def test_mla(ctx, rng, qo_lens):
    H, P, scale = 2, 16, 1.0 / np.sqrt(192)
    kv_lens = [5, 40, 17]
    indptr, indices, _, num_pages = ref.make_csr(rng, kv_lens, P)
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    T = int(qo_indptr[-1])
    ckv = (rng.standard_normal((num_pages, P, 512)) * 0.5).astype(np.float16)
    kpe = (rng.standard_normal((num_pages, P, 64)) * 0.5).astype(np.float16)
    q_nope = (rng.standard_normal((T, H, 512)) * 0.5).astype(np.float16)
    q_pe = (rng.standard_normal((T, H, 64)) * 0.5).astype(np.float16)
    w = clattn.BatchMLAPagedAttentionWrapper(ctx)
    w.plan(qo_indptr, indptr, indices, np.array(kv_lens, np.int32), H, 512, 64, P, True, scale,
           "float16", "float16")
    o, lse = w.run(q_nope, q_pe, ctx.to_device(ckv), ctx.to_device(kpe), return_lse=True)
    o, lse = o.numpy().astype(np.float64), lse.numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        c = ref.gather_pages(ckv[:, :, None, :], sel, n)  # [n, 1, 512]
        kp = ref.gather_pages(kpe[:, :, None, :], sel, n)
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        qq = np.concatenate([q_nope[rs], q_pe[rs]], axis=2)
        kk = np.concatenate([c, kp], axis=2)
        ro, rl = ref.attention(qq, kk, c, sm_scale=scale, causal=True)
        np.testing.assert_allclose(o[rs], ro, atol=1e-2, rtol=1e-2)
        np.testing.assert_allclose(lse[rs], rl * ref.LOG2E, atol=1e-2, rtol=1e-2)


def test_mla_errors(ctx):
    w = clattn.BatchMLAPagedAttentionWrapper(ctx)
    with pytest.raises(clattn.Error, match="512/64"):
        w.plan([0, 1], [0, 1], [0], [3], 2, 128, 64, 16, False, 0.1, "float16", "float16")
    with pytest.raises(clattn.Error, match="kv_len_arr"):
        w.plan([0, 1], [0, 1], [0], [30], 2, 512, 64, 16, False, 0.1, "float16", "float16")


def _lin_inputs(rng, B, T, H=1, HV=2, K=64, V=64):
    q = rng.standard_normal((B, T, H, K)).astype(np.float32) * 0.3
    k = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, HV, V)).astype(np.float32)
    g = -rng.random((B, T, HV)).astype(np.float32) * 0.2
    beta = rng.random((B, T, HV)).astype(np.float32)
    return q, k, v, g, beta


@pytest.mark.parametrize("fn", ["chunk", "recurrent"])
def test_gated_delta_rule(ctx, rng, fn):
    q, k, v, g, beta = _lin_inputs(rng, 1, 70)
    cu = np.array([0, 30, 31, 70], np.int32)
    s0 = rng.standard_normal((3, 2, 64, 64)).astype(np.float32) * 0.1
    f = clattn.chunk_gated_delta_rule if fn == "chunk" else clattn.fused_recurrent_gated_delta_rule
    o, st = f(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu,
              use_qk_l2norm_in_kernel=True)
    assert o.shape == (1, 70, 2, 64) and st.shape == (3, 2, 64, 64)
    o, st = o.numpy(), st.numpy()
    for i in range(3):
        a, b = cu[i], cu[i + 1]
        ro, rs = ref.linear("gdn", q[0, a:b], k[0, a:b], v[0, a:b], g[0, a:b], beta[0, a:b], 1 / 8, s0[i], True)
        np.testing.assert_allclose(o[0, a:b], ro, atol=2e-3, rtol=2e-3)
        np.testing.assert_allclose(st[i], rs, atol=2e-3, rtol=2e-3)


def test_simple_gla_batch_and_gamma(ctx, rng):
    q, k, v, g, _ = _lin_inputs(rng, 2, 9)
    o, st = clattn.chunk_simple_gla(q, k, v, g=g, output_final_state=True)
    o, st = o.numpy(), st.numpy()
    for b in range(2):
        ro, rs = ref.linear("gla", q[b], k[b], v[b], g[b], None, 1 / 8, np.zeros((2, 64, 64)))
        np.testing.assert_allclose(o[b], ro, atol=2e-3, rtol=2e-3)
        np.testing.assert_allclose(st[b], rs, atol=2e-3, rtol=2e-3)
    gamma = np.array([-0.1, -0.3], np.float32)
    o2, none = clattn.fused_recurrent_simple_gla(q, k, v, g_gamma=gamma)
    assert none is None
    ro, _ = ref.linear("gla", q[1], k[1], v[1], gamma, None, 1 / 8, np.zeros((2, 64, 64)))
    np.testing.assert_allclose(o2.numpy()[1], ro, atol=2e-3, rtol=2e-3)


def test_pooled_state_decode_and_prefill(ctx, rng):
    pool0 = rng.standard_normal((4, 2, 64, 64)).astype(np.float32) * 0.1
    pool = ctx.to_device(pool0)
    # prefill two sequences into slots 2 and 0, then one decode step for slot 2 and a padded request
    q, k, v, g, beta = _lin_inputs(rng, 1, 7)
    cu = np.array([0, 4, 7], np.int32)
    o = clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                       initial_state_indices=np.array([2, 0]), cu_seqlens=cu)
    expect = pool0.copy()
    ro0, expect[2] = ref.linear("gdn", q[0, :4], k[0, :4], v[0, :4], g[0, :4], beta[0, :4], 1 / 8, pool0[2])
    ro1, expect[0] = ref.linear("gdn", q[0, 4:], k[0, 4:], v[0, 4:], g[0, 4:], beta[0, 4:], 1 / 8, pool0[0])
    np.testing.assert_allclose(o.numpy()[0], np.concatenate([ro0, ro1]), atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(pool.numpy(), expect, atol=2e-3, rtol=2e-3)
    q, k, v, g, beta = _lin_inputs(rng, 2, 1)  # decode: B = 2 sequences of one token
    o = clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                       initial_state_indices=np.array([2, -1]))
    ro, expect[2] = ref.linear("gdn", q[0], k[0], v[0], g[0], beta[0], 1 / 8, expect[2])
    rpad, _ = ref.linear("gdn", q[1], k[1], v[1], g[1], beta[1], 1 / 8, np.zeros((2, 64, 64)))
    np.testing.assert_allclose(o.numpy()[:, 0], np.stack([ro[0], rpad[0]]), atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(pool.numpy(), expect, atol=2e-3, rtol=2e-3)
    # simple GLA on the same pool
    q, k, v, g, _ = _lin_inputs(rng, 1, 1)
    o = clattn.fused_recurrent_simple_gla_update(q, k, v, g=g, initial_state_source=pool,
                                                 initial_state_indices=np.array([1]))
    ro, expect[1] = ref.linear("gla", q[0], k[0], v[0], g[0], None, 1 / 8, expect[1])
    np.testing.assert_allclose(o.numpy()[0], ro, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(pool.numpy(), expect, atol=2e-3, rtol=2e-3)


def test_linear_errors(ctx, rng):
    q, k, v, g, beta = _lin_inputs(rng, 1, 4)
    pool = ctx.zeros((2, 2, 64, 64), "f32")
    before = pool.numpy()
    with pytest.raises(clattn.Error, match="distinct|state_indices"):
        clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                       initial_state_indices=[1, 1], cu_seqlens=[0, 2, 4])
    with pytest.raises(clattn.Error, match="state_indices"):
        clattn.fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source=pool,
                                                       initial_state_indices=[5], cu_seqlens=[0, 4])
    np.testing.assert_array_equal(pool.numpy(), before)
    with pytest.raises(clattn.Error, match="cu_seqlens"):
        clattn.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=[0, 3])
    with pytest.raises(clattn.Error, match="g: shape"):
        clattn.chunk_gated_delta_rule(q, k, v, g[:, :, :1], beta)
    with pytest.raises(clattn.Error, match="head_dim|Dk|64"):
        clattn.chunk_simple_gla(q[..., :32], k[..., :32], v, g=g)
