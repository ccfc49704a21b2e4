"""FlashInfer API fidelity: positional orders, forward / *_return_lse, page-size-1 caches,
scale arguments, base-2 LSE, numpy conversion of Tensors."""
import inspect

import numpy as np
import pytest

import clattn
import ref

# FlashInfer's signatures (flashinfer/decode.py, prefill.py, mla/_core.py): the parameters
# that may be passed positionally, in order.
FI_DECODE_PLAN = ["indptr", "indices", "last_page_len", "num_qo_heads", "num_kv_heads", "head_dim", "page_size",
                  "pos_encoding_mode", "window_left", "logits_soft_cap", "q_data_type", "kv_data_type",
                  "o_data_type", "data_type", "sm_scale", "rope_scale", "rope_theta", "non_blocking", "block_tables",
                  "seq_lens", "fixed_split_size", "disable_split_kv", "q_len_per_req"]
FI_PAGED_PLAN = ["qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len", "num_qo_heads",
                 "num_kv_heads", "head_dim_qk", "page_size", "head_dim_vo", "custom_mask", "packed_custom_mask",
                 "causal", "pos_encoding_mode", "use_fp16_qk_reduction", "sm_scale", "window_left",
                 "logits_soft_cap", "rope_scale", "rope_theta", "q_data_type", "kv_data_type", "o_data_type",
                 "non_blocking", "prefix_len_ptr", "token_pos_in_items_ptr", "token_pos_in_items_len",
                 "max_item_len_ptr", "seq_lens", "seq_lens_q", "block_tables", "max_token_per_sequence",
                 "max_sequence_kv", "fixed_split_size", "disable_split_kv"]
FI_RAGGED_PLAN = ["qo_indptr", "kv_indptr", "num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo",
                  "custom_mask", "packed_custom_mask", "causal", "pos_encoding_mode", "use_fp16_qk_reduction",
                  "window_left", "logits_soft_cap", "sm_scale", "rope_scale", "rope_theta", "q_data_type",
                  "kv_data_type", "o_data_type", "non_blocking", "prefix_len_ptr", "token_pos_in_items_ptr",
                  "token_pos_in_items_len", "max_item_len_ptr", "fixed_split_size", "disable_split_kv", "seq_lens",
                  "seq_lens_q", "max_token_per_sequence", "max_sequence_kv", "v_indptr", "o_indptr"]
FI_DECODE_FORWARD = ["q", "paged_kv_cache", "pos_encoding_mode", "q_scale", "k_scale", "v_scale", "window_left",
                     "logits_soft_cap", "sm_scale", "rope_scale", "rope_theta"]
FI_PAGED_FORWARD = ["q", "paged_kv_cache", "causal", "pos_encoding_mode", "use_fp16_qk_reduction", "k_scale",
                    "v_scale", "window_left", "logits_soft_cap", "sm_scale", "rope_scale", "rope_theta"]
FI_RAGGED_FORWARD = ["q", "k", "v", "causal", "pos_encoding_mode", "use_fp16_qk_reduction", "window_left",
                     "logits_soft_cap", "sm_scale", "rope_scale", "rope_theta"]
FI_MLA_RUN = ["q_nope", "q_pe", "ckv_cache", "kpe_cache", "out", "lse", "return_lse", "profiler_buffer", "kv_len",
              "page_table", "return_lse_base_on_e", "o_scale"]


def _positional(fn):
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds and p.name != "self"]


@pytest.mark.parametrize("fn, names", [
    (clattn.BatchDecodeWithPagedKVCacheWrapper.plan, FI_DECODE_PLAN),
    (clattn.BatchPrefillWithPagedKVCacheWrapper.plan, FI_PAGED_PLAN),
    (clattn.BatchPrefillWithRaggedKVCacheWrapper.plan, FI_RAGGED_PLAN),
    (clattn.BatchDecodeWithPagedKVCacheWrapper.forward, FI_DECODE_FORWARD),
    (clattn.BatchDecodeWithPagedKVCacheWrapper.forward_return_lse, FI_DECODE_FORWARD),
    (clattn.BatchPrefillWithPagedKVCacheWrapper.forward, FI_PAGED_FORWARD),
    (clattn.BatchPrefillWithPagedKVCacheWrapper.forward_return_lse, FI_PAGED_FORWARD),
    (clattn.BatchPrefillWithRaggedKVCacheWrapper.forward, FI_RAGGED_FORWARD),
    (clattn.BatchPrefillWithRaggedKVCacheWrapper.forward_return_lse, FI_RAGGED_FORWARD),
    (clattn.BatchMLAPagedAttentionWrapper.run, FI_MLA_RUN),
])
def test_positional_order_is_flashinfers(fn, names):
    assert _positional(fn) == names


def _decode_data(rng, kv_lens=(6, 19), Hq=4, Hkv=2, D=64, P=16):
    indptr, indices, last, num_pages = ref.make_csr(rng, list(kv_lens), P)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((len(kv_lens), Hq, D)).astype(np.float32)
    return (indptr, indices, last, Hq, Hkv, D, P), q, k, v


def _decode_ref(meta, q, k, v, **kw):
    indptr, indices, last, Hq, Hkv, D, P = meta
    os, ls = [], []
    for i in range(len(last)):
        n = (indptr[i + 1] - indptr[i] - 1) * P + last[i]
        sel = indices[indptr[i]:indptr[i + 1]]
        o, l = ref.attention(q[i:i + 1], ref.gather_pages(k, sel, n), ref.gather_pages(v, sel, n), **kw)
        os.append(o[0]), ls.append(l[0])
    return np.stack(os), np.stack(ls)


def test_decode_plan_positional_sm_scale(ctx, rng):
    meta, q, k, v = _decode_data(rng)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    # FlashInfer order: ..., q_data_type, kv_data_type, o_data_type, data_type, sm_scale
    w.plan(*meta, "NONE", -1, None, "float32", "float32", "float32", None, 0.3)
    ro, _ = _decode_ref(meta, q, k, v, sm_scale=0.3)
    np.testing.assert_allclose(w.run(q, (k, v)).numpy(), ro, atol=2e-3, rtol=2e-3)


def test_decode_forward_overrides_and_lse(ctx, rng):
    meta, q, k, v = _decode_data(rng)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(*meta, q_data_type="float32", sm_scale=0.3)
    ro, rl = _decode_ref(meta, q, k, v, sm_scale=0.2, soft_cap=4.0)
    o = w.forward(q, (k, v), sm_scale=0.2, logits_soft_cap=4.0, k_scale=1.0, v_scale=1.0)
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    o, lse = w.forward_return_lse(q, (k, v), sm_scale=0.2, logits_soft_cap=4.0)
    np.testing.assert_allclose(lse.numpy(), rl * ref.LOG2E, atol=2e-3, rtol=2e-3)
    # forward's defaults apply (FlashInfer: forward sets them), then run keeps them
    ro, rl = _decode_ref(meta, q, k, v)
    np.testing.assert_allclose(w.forward(q, (k, v)).numpy(), ro, atol=2e-3, rtol=2e-3)
    o, lse = w.run_return_lse(q, (k, v))
    np.testing.assert_allclose(lse.numpy(), rl * ref.LOG2E, atol=2e-3, rtol=2e-3)
    o, lse = w.run(q, (k, v), return_lse=True, return_lse_base_on_e=True)
    np.testing.assert_allclose(lse.numpy(), rl, atol=2e-3, rtol=2e-3)
    ro, _ = _decode_ref(meta, q, k, v, window_left=4)
    np.testing.assert_allclose(w.run(q, (k, v), window_left=4).numpy(), ro, atol=2e-3, rtol=2e-3)


def _prefill_data(rng, kv_lens=(9, 18), qo_lens=(3, 2), Hq=4, Hkv=2, D=64, P=16):
    indptr, indices, last, num_pages = ref.make_csr(rng, list(kv_lens), P)
    qo = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((qo[-1], Hq, D)).astype(np.float32)
    kr = [ref.gather_pages(k, indices[indptr[i]:indptr[i + 1]], n) for i, n in enumerate(kv_lens)]
    vr = [ref.gather_pages(v, indices[indptr[i]:indptr[i + 1]], n) for i, n in enumerate(kv_lens)]
    return qo, (indptr, indices, last), (Hq, Hkv, D, P), q, k, v, kr, vr


def _prefill_ref(qo, q, kr, vr, **kw):
    os, ls = zip(*[ref.attention(q[qo[i]:qo[i + 1]], kr[i], vr[i], **kw) for i in range(len(kr))])
    return np.concatenate(os), np.concatenate(ls)


def test_prefill_forward_causal_window_and_lse(ctx, rng):
    qo, csr, (Hq, Hkv, D, P), q, k, v, kr, vr = _prefill_data(rng)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx)
    w.plan(qo, *csr, Hq, Hkv, D, P, q_data_type="float32")  # planned non-causal
    ro, rl = _prefill_ref(qo, q, kr, vr, causal=True, window_left=5, sm_scale=0.25)
    o = w.forward(q, (k, v), causal=True, window_left=5, sm_scale=0.25)
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    o, lse = w.forward_return_lse(q, (k, v), causal=True, window_left=5, sm_scale=0.25)
    np.testing.assert_allclose(lse.numpy(), rl * ref.LOG2E, atol=2e-3, rtol=2e-3)
    o, lse = w.run_return_lse(q, (k, v))
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    ro, rl = _prefill_ref(qo, q, kr, vr)
    o, lse = w.forward_return_lse(q, (k, v))
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    rw = clattn.BatchPrefillWithRaggedKVCacheWrapper(ctx)
    kv_indptr = np.concatenate([[0], np.cumsum([len(x) for x in kr])]).astype(np.int32)
    rw.plan(qo, kv_indptr, Hq, Hkv, D, q_data_type="float32")
    K, V = np.concatenate(kr).astype(np.float32), np.concatenate(vr).astype(np.float32)
    o, lse = rw.forward_return_lse(q, K, V, causal=True, logits_soft_cap=3.0)
    ro, rl = _prefill_ref(qo, q, kr, vr, causal=True, soft_cap=3.0)
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(lse.numpy(), rl * ref.LOG2E, atol=2e-3, rtol=2e-3)
    o, lse = rw.run_return_lse(q, K, V, return_lse_base_on_e=True)
    np.testing.assert_allclose(lse.numpy(), rl, atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(rw.forward(q, K, V, causal=True, logits_soft_cap=3.0).numpy(), ro, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_page_size_one_3d_caches(ctx, rng, layout):
    kv_lens, Hq, Hkv, D = [3, 7], 4, 2, 64
    meta, q, k4, v4 = _decode_data(rng, kv_lens, Hq, Hkv, D, 1)
    k, v = k4[:, 0], v4[:, 0]  # [slots, Hkv, D]
    ro, _ = _decode_ref(meta, q, k4, v4)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, layout)
    w.plan(*meta, q_data_type="float32")
    np.testing.assert_allclose(w.run(q, (ctx.to_device(k), ctx.to_device(v))).numpy(), ro, atol=2e-3, rtol=2e-3)
    indptr, indices, last = meta[:3]
    pw = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, layout)
    pw.plan(np.arange(3, dtype=np.int32), indptr, indices, last, Hq, Hkv, D, 1, causal=True, q_data_type="float32")
    np.testing.assert_allclose(pw.run(q, (k, v)).numpy(), ro, atol=2e-3, rtol=2e-3)
    kc, vc = np.zeros_like(k), np.zeros_like(v)
    clattn.append_kv(k[:2], v[:2], np.array([4, 1]), kc, vc, layout, ctx=ctx)
    np.testing.assert_array_equal(kc[4], k[0])
    np.testing.assert_array_equal(vc[1], v[1])
    w16 = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, layout)
    w16.plan(indptr, indices, last, Hq, Hkv, D, 16, q_data_type="float32")
    with pytest.raises(clattn.Error, match="k_cache: a 3-D cache .* page_size is 16"):
        w16.run(q, (k, v))


def test_scale_arguments(ctx, rng):
    meta, q, k, v = _decode_data(rng)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(*meta, q_data_type="float32")
    ro, _ = _decode_ref(meta, q, k * 0.5, v * 2.0)
    o = w.run(q, (k, v), k_scale=np.array([0.5], np.float32), v_scale=ctx.to_device(np.array([2.0], np.float32)))
    np.testing.assert_allclose(o.numpy(), ro, atol=2e-3, rtol=2e-3)
    # Per-KV-head scales (Hkv = 2) are taken (tests/python/test_kv_int8.py); other counts are not.
    with pytest.raises(clattn.Error, match=r"k_scale: shape \[3\]: expected one value or \[2\]") as e:
        w.run(q, (k, v), k_scale=np.array([0.5, 0.7, 0.9], np.float32))
    assert e.value.status == "invalid argument"
    with pytest.raises(clattn.Error, match="q_scale"):
        w.run(q, (k, v), q_scale=2.0)


def test_cascade_merge_of_base2_lse(ctx, rng):
    """Attention over [A: B] = merge_state of the two halves, all with the default (base-2) LSE."""
    Hq, Hkv, D, P = 4, 2, 64, 16
    k = rng.standard_normal((4, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((4, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((1, Hq, D)).astype(np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    parts = []
    for pages in ([0, 1], [2, 3]):
        w.plan([0, 2], pages, [P], Hq, Hkv, D, P, q_data_type="float32")
        parts.append(w.run_return_lse(q, (k, v)))
    o, s = clattn.merge_state(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    w.plan([0, 4], [0, 1, 2, 3], [P], Hq, Hkv, D, P, q_data_type="float32")
    fo, fs = w.run_return_lse(q, (k, v))
    np.testing.assert_allclose(o.numpy(), fo.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(s.numpy(), fs.numpy(), atol=1e-4, rtol=1e-4)
    vt, st = parts[0][0].clone(), parts[0][1].clone()
    clattn.merge_state_in_place(vt, st, parts[1][0], parts[1][1])
    np.testing.assert_allclose(st.numpy(), fs.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(parts[1][1].numpy(), parts[1][1].numpy())  # inputs untouched
    vs = np.stack([parts[0][0].numpy(), parts[1][0].numpy()], axis=1)
    ss = np.stack([parts[0][1].numpy(), parts[1][1].numpy()], axis=1)
    mo, ms = clattn.merge_states(vs, ss, ctx=ctx)
    np.testing.assert_allclose(ms.numpy(), fs.numpy(), atol=1e-4, rtol=1e-4)
    eo, es = clattn.merge_state(parts[0][0], parts[0][1].numpy() / ref.LOG2E, parts[1][0],
                                parts[1][1].numpy() / ref.LOG2E, lse_base_on_e=True)
    np.testing.assert_allclose(es.numpy(), fs.numpy() / ref.LOG2E, atol=1e-4, rtol=1e-4)


def test_tensor_array_protocol(ctx, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = ctx.to_device(a)
    np.testing.assert_array_equal(np.asarray(t), a)
    b = np.asarray(t, dtype=np.float64)
    assert b.dtype == np.float64 and np.array_equal(b, a)
    np.testing.assert_array_equal(t.__array__(None, None), a)
    assert np.array_equal(np.array(t), a) and (np.array(t) + 1).shape == (3, 4)
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(copy=False)
    bits = ctx.to_device(clattn.float_to_bf16(a), "bf16")
    assert np.asarray(bits).dtype == np.uint16  # bf16 as raw bits, as Tensor.numpy()
    # DLPack export is kDLOpenCL (a cl_mem): host consumers such as numpy refuse it
    assert t.__dlpack_device__()[0] == 4
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(t)
