"""int8 MLA latent caches (a (ckv scale, kpe scale) pair per token in a scale cache beside the
pages; docs/kv_formats.md "int8 MLA latent") through BatchMLAPagedAttentionWrapper and
MlaSparseDecodeWrapper: decode and causal extend match the float64 reference over the
dequantised rows, a scale cache of the other dtype plans again, bad arguments are refused
naming the argument with the output untouched."""
import numpy as np
import pytest

import clattn
import ref

H, P, SCALE = 2, 16, 1.0 / np.sqrt(192)


def int8_latent(rng, num_pages, f16_scale):
    """Random latent pages quantised as append_latent stores them: (q_ckv, q_kpe, pairs,
    (ckv, kpe) dequantised). kpe is ~10x ckv's range, so one shared scale would not do."""
    ckv = (rng.standard_normal((num_pages, P, 512)) * 0.5).astype(np.float32)
    kpe = (rng.standard_normal((num_pages, P, 64)) * 5.0).astype(np.float32)
    ckv[:, 3] = 0.0  # every page's token 3 has an all-zero ckv part: scale 0
    return ref.int8_quantize_latent(ckv, kpe, f16_scale)


def check_dense(o, lse, qn, qp, ckv_d, kpe_d, kv_lens, qo_indptr, indptr, indices, tol=2e-4):
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        c = ref.gather_pages(ckv_d[:, :, None, :], sel, n)  # [n, 1, 512]
        kp = ref.gather_pages(kpe_d[:, :, None, :], sel, n)
        rs = slice(qo_indptr[i], qo_indptr[i + 1])
        ro, rl = ref.attention(np.concatenate([qn[rs], qp[rs]], axis=2), np.concatenate([c, kp], axis=2), c,
                               sm_scale=SCALE, causal=True)
        np.testing.assert_allclose(o[rs], ro, atol=tol, rtol=tol, err_msg=f"request {i}")
        np.testing.assert_allclose(lse[rs], rl * ref.LOG2E, atol=tol, rtol=tol, err_msg=f"request {i} lse")


@pytest.mark.parametrize("qo_lens,scale_dtype", [([1, 1, 1], "float32"), ([3, 1, 4], "float16"),
                                                 ([1, 1, 1], "float16")])
def test_mla_int8_matches_reference(ctx, rng, qo_lens, scale_dtype):
    kv_lens = [5, 40, 17]
    indptr, indices, _, num_pages = ref.make_csr(rng, kv_lens, P)
    qc, qk, pairs, (ckv_d, kpe_d) = int8_latent(rng, num_pages, scale_dtype == "float16")
    qo_indptr = np.concatenate([[0], np.cumsum(qo_lens)]).astype(np.int32)
    T = int(qo_indptr[-1])
    qn = rng.standard_normal((T, H, 512)).astype(np.float32) * 0.5
    qp = rng.standard_normal((T, H, 64)).astype(np.float32) * 0.5
    w = clattn.BatchMLAPagedAttentionWrapper(ctx)
    w.plan(qo_indptr, indptr, indices, np.array(kv_lens, np.int32), H, 512, 64, P, True, SCALE, "float32", "int8",
           kv_scale_data_type=scale_dtype)
    sc = pairs.astype(np.float16 if scale_dtype == "float16" else np.float32)
    # Device tensors, and numpy arrays (uploaded per call).
    o, lse = w.run(qn, qp, ctx.to_device(qc), ctx.to_device(qk), return_lse=True, scale_cache=ctx.to_device(sc))
    check_dense(o.numpy(), lse.numpy(), qn, qp, ckv_d, kpe_d, kv_lens, qo_indptr, indptr, indices)
    o2 = w.run(qn, qp, qc, qk, scale_cache=sc)
    np.testing.assert_array_equal(o2.numpy(), o.numpy())


def test_mla_int8_other_scale_dtype_plans_again(ctx, rng):
    """A float32-scale plan run with a float16 scale cache plans again (once, kept) and
    reads the pairs as float16."""
    kv_lens = [23, 9]
    indptr, indices, _, num_pages = ref.make_csr(rng, kv_lens, P)
    qc, qk, pairs, (ckv_d, kpe_d) = int8_latent(rng, num_pages, True)
    qo_indptr = np.arange(len(kv_lens) + 1, dtype=np.int32)
    qn = rng.standard_normal((2, H, 512)).astype(np.float32) * 0.5
    qp = rng.standard_normal((2, H, 64)).astype(np.float32) * 0.5
    w = clattn.BatchMLAPagedAttentionWrapper(ctx)
    w.plan(qo_indptr, indptr, indices, np.array(kv_lens, np.int32), H, 512, 64, P, False, SCALE, "float32", "int8")
    first = w.plan_info
    o, lse = w.run(qn, qp, qc, qk, return_lse=True, scale_cache=ctx.to_device(pairs.astype(np.float16)))
    assert w.plan_info is not first
    check_dense(o.numpy(), lse.numpy(), qn, qp, ckv_d, kpe_d, kv_lens, qo_indptr, indptr, indices)
    o32 = w.run(qn, qp, qc, qk, scale_cache=pairs)  # f16-exact pairs in float32: the same values
    assert w.plan_info is first
    np.testing.assert_allclose(o32.numpy(), o.numpy(), atol=1e-6, rtol=1e-6)


def test_mla_sparse_int8(ctx, rng):
    """Sparse decode reads an int8 latent with its scale cache: each request attends to the
    listed positions (-1 padding, a repeat) of the dequantised rows."""
    kv_lens, topk = [40, 7], 6
    indptr, indices, _, num_pages = ref.make_csr(rng, kv_lens, P)
    qc, qk, pairs, (ckv_d, kpe_d) = int8_latent(rng, num_pages, False)
    lists = np.array([[0, 39, 17, 17, 5, -1], [6, 0, 3, -1, -1, -1]], np.int32)
    qn = rng.standard_normal((2, H, 512)).astype(np.float32) * 0.5
    qp = rng.standard_normal((2, H, 64)).astype(np.float32) * 0.5
    w = clattn.MlaSparseDecodeWrapper(ctx)
    w.plan(indptr, indices, np.array(kv_lens, np.int32), H, 512, 64, P, SCALE, topk, "float32", "int8")
    o = w.run(qn, qp, qc, qk, lists, scale_cache=pairs).numpy()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        c = ref.gather_pages(ckv_d[:, :, None, :], sel, n)
        kp = ref.gather_pages(kpe_d[:, :, None, :], sel, n)
        pos = lists[i][lists[i] >= 0]
        ro, _ = ref.attention(np.concatenate([qn[i:i + 1], qp[i:i + 1]], axis=2),
                              np.concatenate([c[pos], kp[pos]], axis=2), c[pos], sm_scale=SCALE)
        np.testing.assert_allclose(o[i], ro[0], atol=2e-4, rtol=2e-4, err_msg=f"request {i}")
    with pytest.raises(clattn.Error, match="scale_cache: required"):
        w.run(qn, qp, qc, qk, lists)


def test_mla_int8_errors(ctx, rng):
    kv_lens = [9]
    indptr, indices, _, num_pages = ref.make_csr(rng, kv_lens, P)
    qc, qk, pairs, _ = int8_latent(rng, num_pages, False)
    qn = np.zeros((1, H, 512), np.float32)
    qp = np.zeros((1, H, 64), np.float32)
    w = clattn.BatchMLAPagedAttentionWrapper(ctx)
    w.plan([0, 1], indptr, indices, kv_lens, H, 512, 64, P, False, SCALE, "float32", "int8")
    out = np.full((1, H, 512), 7.0, np.float32)
    bad = [
        (dict(), "scale_cache: required with an int8 latent cache"),
        (dict(scale_cache=np.ones((num_pages, P, 3), np.float32)), r"scale_cache: shape \[.*\], expected"),
        (dict(scale_cache=np.ones((num_pages - 1, P, 2), np.float32)), r"scale_cache: shape"),
        (dict(scale_cache=ctx.to_device(clattn.float_to_bf16(pairs), "bf16")), "scale_cache: dtype bf16"),
        (dict(scale_cache=pairs.astype(np.int32)), "scale_cache: dtype i32"),
        (dict(scale_cache=pairs, ckv_scale=0.5), "ckv_scale: an int8 latent cache"),
        (dict(scale_cache=pairs, kpe_scale=2.0), "kpe_scale: an int8 latent cache"),
        (dict(scale_cache=pairs, kv_scale=0.25), "kv_scale: an int8 latent cache"),
    ]
    for kw, msg in bad:
        with pytest.raises(clattn.Error, match=msg):
            w.run(qn, qp, qc, qk, out=out, **kw)
    np.testing.assert_array_equal(out, 7.0)  # nothing written by a refused call
    w.run(qn, qp, qc, qk, out=out, scale_cache=pairs, ckv_scale=1.0)  # 1 is the int8 value
    with pytest.raises(clattn.Error, match="ckv_cache: dtype"):
        w.run(qn, qp, qc.astype(np.float32), qk, scale_cache=pairs)
    with pytest.raises(clattn.Error, match="kv_scale_data_type"):
        w.plan([0, 1], indptr, indices, kv_lens, H, 512, 64, P, False, SCALE, "float32", "int8",
               kv_scale_data_type="bfloat16")
    # A float latent takes no scale cache.
    w.plan([0, 1], indptr, indices, kv_lens, H, 512, 64, P, False, SCALE, "float32", "float32")
    with pytest.raises(clattn.Error, match="scale_cache: the latent cache is f32"):
        w.run(qn, qp, qc.astype(np.float32), qk.astype(np.float32), scale_cache=pairs)
