"""DsaIndexer and MlaSparseDecodeWrapper (DeepSeek sparse attention) against float64 numpy
references written here from include/clattn/sparse.hpp: the indexer's
score = sum_h w * relu(q . k), top-k with ties to the lower position, ascending positions,
-1 / -inf padding; sparse MLA decode as a softmax over the listed positions (-1 and
positions outside the request skipped, repeats counted twice).

Indexer data are small integers (and fp8 codes of small integers), so every score is exact
on the device and here: indices and scores are compared exactly, ties included. Cache slots
no request holds are NaN (float keys, latents) or a large fp8 key, so a read outside a
request's keys changes the result."""
import numpy as np
import pytest

import clattn
import ref

INT32_MAX = 2**31 - 1
FP8_E4M3 = {-2: 0xC0, -1: 0xB8, 0: 0x00, 1: 0x38, 2: 0x40}  # e4m3 codes of small integers
FP8_LARGE = 0x68  # 64.0 in e4m3


def _pages(indptr, indices, i):
    return indices[indptr[i]:indptr[i + 1]]


def _rows(pool, pages, L, P):
    """Request rows [L, ...] of a paged pool [num_pages, P, ...]."""
    return np.stack([pool[pages[t // P], t % P] for t in range(L)]) if L else pool[:0, 0]


def _table(indptr, indices):
    width = max(1, int(np.diff(indptr).max()))
    t = np.full((len(indptr) - 1, width), -1, np.int32)
    for i in range(len(indptr) - 1):
        pg = _pages(indptr, indices, i)
        t[i, :len(pg)] = pg
    return t


def ref_index(q, w, k, topk):
    """One request: q [Hi, Di], w [Hi], k [L, Di] -> (indices [topk], scores [topk])."""
    L = k.shape[0]
    s = np.maximum(k.astype(np.float64) @ q.astype(np.float64).T, 0) @ w.astype(np.float64) if L else np.zeros(0)
    best = sorted(sorted(range(L), key=lambda t: (-s[t], t))[:topk])
    idx = np.full(topk, -1, np.int32)
    sc = np.full(topk, -np.inf)
    idx[:len(best)], sc[:len(best)] = best, s[best]
    return idx, sc


def ref_sparse(qn, qp, ckv, kpe, lst, scale):
    """One request: qn [H, 512], qp [H, 64], ckv [L, 512], kpe [L, 64], list [topk] -> o [H, 512], natural lse [H]."""
    H, L = qn.shape[0], ckv.shape[0]
    pos = [int(p) for p in lst if 0 <= p < L]
    if not pos:
        return np.zeros((H, qn.shape[1])), np.full(H, -np.inf)
    c, kp = ckv[pos].astype(np.float64), kpe[pos].astype(np.float64)
    s = (qn.astype(np.float64) @ c.T + qp.astype(np.float64) @ kp.T) * scale
    m = s.max(1, keepdims=True)
    p = np.exp(s - m)
    return p @ c / p.sum(1, keepdims=True), m[:, 0] + np.log(p.sum(1))


def _index_batch(rng, lens, Hi, Di, P, kv):
    """Indexer inputs: CSR, device-form cache (bits for bf16 / fp8), its values as read, q, w."""
    indptr, indices, last, num_pages = ref.make_csr(rng, lens, P)
    vals = rng.integers(-2, 3, (num_pages, P, Di))
    used = np.zeros((num_pages, P), bool)
    for i, L in enumerate(lens):
        for t in range(L):
            used[_pages(indptr, indices, i)[t // P], t % P] = True
    k_scale = 1.0
    if kv == "fp8_e4m3":
        cache = np.vectorize(FP8_E4M3.get)(vals).astype(np.uint8)
        cache[~used] = FP8_LARGE
        k_scale = 0.5
        read = ref.fp8_to_float(cache) * k_scale
    else:
        read = vals.astype(np.float32)
        read[~used] = np.nan
        cache = clattn.float_to_bf16(read) if kv == "bf16" else read
    q = rng.integers(-2, 3, (len(lens), Hi, Di)).astype(np.float32)
    w = rng.integers(-1, 3, (len(lens), Hi)).astype(np.float32)
    return indptr, indices, last, cache, read, k_scale, q, w


def _check_index(got_idx, got_sc, indptr, indices, read, q, w, lens, P, topk):
    for i, L in enumerate(lens):
        want_idx, want_sc = ref_index(q[i], w[i], _rows(read, _pages(indptr, indices, i), L, P), topk)
        np.testing.assert_array_equal(got_idx[i], want_idx, err_msg=f"request {i}")
        if got_sc is not None:
            np.testing.assert_array_equal(got_sc[i], want_sc, err_msg=f"request {i}")


@pytest.mark.parametrize("kv,P,form", [("f32", 16, "csr"), ("bf16", 64, "table"), ("fp8_e4m3", 16, "table"),
                                       ("bf16", 1, "csr")])
def test_dsa_indexer_matches_reference(ctx, rng, kv, P, form):
    lens, Hi, Di, topk = [150, 0, 9, 70], 8, 32, 12  # an empty request and one shorter than topk
    indptr, indices, last, cache, read, k_scale, q, w = _index_batch(rng, lens, Hi, Di, P, kv)
    idx = clattn.DsaIndexer(ctx)
    if form == "table":
        idx.plan(None, None, None, Hi, Di, P, topk, q_data_type="float32", kv_data_type=kv,
                 block_tables=_table(indptr, indices), seq_lens=np.array(lens))
    else:
        idx.plan(indptr, indices, last, Hi, Di, P, topk, "float32", kv)
    info = idx.plan_info
    assert info.topk == topk and info.max_kv_len == 150 and info.page_table == (form == "table")
    assert info.workspace_bytes > 0 and info.variant == "generic"
    got_idx, got_sc = idx.run(q, w, cache, k_scale=k_scale)
    assert got_idx.shape == (4, topk) and got_idx.dtype == "i32" and got_sc.dtype == "f32"
    _check_index(got_idx.numpy(), got_sc.numpy(), indptr, indices, read, q, w, lens, P, topk)


def test_dsa_indexer_outputs_and_forms(ctx, rng):
    """No scores; numpy destinations written in place; the [pages, P, 1, Di] cache form;
    bf16 q; topk above every length (all padding past L)."""
    lens, Hi, Di, P, topk = [40, 23], 3, 16, 16, 64
    indptr, indices, last, cache, read, _, q, w = _index_batch(rng, lens, Hi, Di, P, "f32")
    idx = clattn.DsaIndexer(ctx)
    idx.plan(indptr, indices, last, Hi, Di, P, topk, q_data_type="bfloat16", kv_data_type="float32")
    got, none = idx.run(clattn.float_to_bf16(q), w, cache, return_scores=False)
    assert none is None
    _check_index(got.numpy(), None, indptr, indices, read, q, w, lens, P, topk)
    out_i = np.zeros((2, topk), np.int32)
    out_s = np.zeros((2, topk), np.float32)
    a, b = idx.run(clattn.float_to_bf16(q), w.astype(np.float64), cache[:, :, None, :], out_indices=out_i,
                   out_scores=out_s)
    assert a is out_i and b is out_s
    np.testing.assert_array_equal(out_i, got.numpy())
    _check_index(out_i, out_s, indptr, indices, read, q, w, lens, P, topk)


def _latent(rng, lens, P, H):
    indptr, indices, _, num_pages = ref.make_csr(rng, lens, P)
    ckv = np.full((num_pages, P, 512), np.nan, np.float32)
    kpe = np.full((num_pages, P, 64), np.nan, np.float32)
    for i, L in enumerate(lens):
        for t in range(L):
            pg = _pages(indptr, indices, i)[t // P]
            ckv[pg, t % P] = clattn.bf16_to_float(clattn.float_to_bf16(rng.uniform(-1, 1, 512)))
            kpe[pg, t % P] = clattn.bf16_to_float(clattn.float_to_bf16(rng.uniform(-1, 1, 64)))
    qn = rng.uniform(-1, 1, (len(lens), H, 512)).astype(np.float32)
    qp = rng.uniform(-1, 1, (len(lens), H, 64)).astype(np.float32)
    return indptr, indices, ckv, kpe, qn, qp


def _lists(rng, lens, topk):
    """Index lists: valid positions, -1, L, past L, negative ones, INT32_MAX and repeats."""
    out = np.full((len(lens), topk), -1, np.int64)
    for i, L in enumerate(lens):
        for j in range(topk):
            r = rng.integers(0, 10)
            if r == 0 or L == 0:
                p = -1
            elif r == 1:
                p = L + int(rng.integers(0, 3))
            elif r == 2:
                p = INT32_MAX if rng.integers(0, 2) else -int(rng.integers(2, 100))
            elif r == 3 and j:
                p = out[i, rng.integers(0, j)]
            else:
                p = int(rng.integers(0, L))
            out[i, j] = p
    return out


def _check_sparse(o, lse, lists, indptr, indices, ckv, kpe, qn, qp, lens, P, scale, tol, base2=True):
    for i, L in enumerate(lens):
        pg = _pages(indptr, indices, i)
        want_o, want_lse = ref_sparse(qn[i], qp[i], _rows(ckv, pg, L, P), _rows(kpe, pg, L, P), lists[i], scale)
        np.testing.assert_allclose(o[i], want_o, atol=tol, rtol=tol, err_msg=f"request {i}")
        if lse is not None:
            fin = np.isfinite(want_lse)
            assert np.all(np.isneginf(lse[i][~fin])), lse[i]
            np.testing.assert_allclose(lse[i][fin], want_lse[fin] * (ref.LOG2E if base2 else 1), atol=tol, rtol=tol)


@pytest.mark.parametrize("form,P", [("csr", 16), ("table", 64), ("csr", 1)])
def test_mla_sparse_matches_reference(ctx, rng, form, P):
    lens, H, topk, scale = [90, 5, 0, 33], 4, 24, 0.0625
    indptr, indices, ckv, kpe, qn, qp = _latent(rng, lens, P, H)
    lists = _lists(rng, lens, topk)
    kv_lens = np.array(lens, np.int32)
    w = clattn.MlaSparseDecodeWrapper(ctx)
    if form == "table":
        w.plan(None, None, None, H, 512, 64, P, scale, topk, "float32", "bf16", block_tables=_table(indptr, indices),
               seq_lens=kv_lens)
    else:
        w.plan(indptr, indices, kv_lens, H, 512, 64, P, scale, topk, "float32", "bf16")
    assert w.plan_info.topk == topk
    tol = 1e-2 if w.plan_info.variant == "nv_mma_sync" else 2e-4
    bits = clattn.float_to_bf16
    o, lse = w.run(qn, qp, bits(ckv), bits(kpe), lists, return_lse=True)
    _check_sparse(o.numpy(), lse.numpy(), lists, indptr, indices, ckv, kpe, qn, qp, lens, P, scale, tol)
    out = np.zeros((len(lens), H, 512), np.float32)
    o2, lse_e = w.run(qn, qp, bits(ckv), bits(kpe), ctx.to_device(lists.astype(np.int32)), out=out, return_lse=True,
                      return_lse_base_on_e=True)
    assert o2 is out
    np.testing.assert_array_equal(out, o.numpy())
    _check_sparse(out, lse_e.numpy(), lists, indptr, indices, ckv, kpe, qn, qp, lens, P, scale, tol, base2=False)


def test_dsa_indexer_feeds_sparse_decode(ctx, rng):
    """The indexer's indices stay on the device and drive sparse decode; one CSR plans both
    (the index cache is paged like the latent cache)."""
    lens, H, Hi, Di, P, topk, scale = [120, 17, 64], 4, 4, 32, 16, 20, 0.0625
    indptr, indices, ckv, kpe, qn, qp = _latent(rng, lens, P, H)
    num_pages = ckv.shape[0]
    kidx = np.full((num_pages, P, Di), np.nan, np.float32)
    for i, L in enumerate(lens):
        for t in range(L):
            kidx[_pages(indptr, indices, i)[t // P], t % P] = rng.integers(-2, 3, Di)
    q = rng.integers(-2, 3, (len(lens), Hi, Di)).astype(np.float32)
    wts = rng.integers(-1, 3, (len(lens), Hi)).astype(np.float32)
    last = np.array([L - (len(_pages(indptr, indices, i)) - 1) * P for i, L in enumerate(lens)], np.int32)
    idx = clattn.DsaIndexer(ctx)
    idx.plan(indptr, indices, last, Hi, Di, P, topk, "float32")
    mla = clattn.MlaSparseDecodeWrapper(ctx)
    mla.plan(indptr, indices, np.array(lens, np.int32), H, 512, 64, P, scale, topk, "float32", "bf16")
    dev_idx, _ = idx.run(q, wts, kidx, return_scores=False)
    assert isinstance(dev_idx, clattn.Tensor)
    o = mla.run(qn, qp, clattn.float_to_bf16(ckv), clattn.float_to_bf16(kpe), dev_idx).numpy()
    lists = np.stack([ref_index(q[i], wts[i], _rows(kidx, _pages(indptr, indices, i), L, P), topk)[0]
                      for i, L in enumerate(lens)])
    np.testing.assert_array_equal(dev_idx.numpy(), lists)
    tol = 1e-2 if mla.plan_info.variant == "nv_mma_sync" else 2e-4
    _check_sparse(o, None, lists, indptr, indices, ckv, kpe, qn, qp, lens, P, scale, tol)


def test_dsa_errors(ctx, rng):
    lens, Hi, Di, P, topk = [40, 20], 4, 32, 16, 8
    indptr, indices, last, cache, _, _, q, w = _index_batch(rng, lens, Hi, Di, P, "f32")
    idx = clattn.DsaIndexer(ctx)
    with pytest.raises(clattn.Error, match="before plan"):
        idx.run(q, w, cache)
    with pytest.raises(clattn.Error, match="topk") as ei:
        idx.plan(indptr, indices, last, Hi, Di, P, 0, "float32")
    assert ei.value.status == "invalid argument"
    with pytest.raises(clattn.Error, match="num_index_heads"):
        idx.plan(indptr, indices, last, 0, Di, P, topk, "float32")
    with pytest.raises(clattn.Error, match="head_dim"):
        idx.plan(indptr, indices, last, Hi, 40, P, topk, "float32")
    with pytest.raises(clattn.Error, match="one metadata form"):
        idx.plan(indptr, indices, last, Hi, Di, P, topk, block_tables=np.zeros((2, 3), np.int32), seq_lens=lens)
    with pytest.raises(clattn.Error, match="kv_last_page_len"):
        idx.plan(indptr, indices, None, Hi, Di, P, topk)
    bad = indices.copy()
    bad[0] = -7
    with pytest.raises(clattn.Error, match="kv_indices"):
        idx.plan(indptr, bad, last, Hi, Di, P, topk, "float32", num_pages=cache.shape[0])
    idx.plan(indptr, indices, last, Hi, Di, P, topk, "float32")
    with pytest.raises(clattn.Error, match="q: shape"):
        idx.run(q[:1], w, cache)
    with pytest.raises(clattn.Error, match="weights: shape"):
        idx.run(q, w[:, :2], cache)
    with pytest.raises(clattn.Error, match="weights: numpy int"):
        idx.run(q, w.astype(np.int32), cache)
    with pytest.raises(clattn.Error, match="k_index_cache: shape"):
        idx.run(q, w, cache[:, :8])
    with pytest.raises(clattn.Error, match="out_indices: shape"):
        idx.run(q, w, cache, out_indices=np.zeros((2, topk + 1), np.int32))
    with pytest.raises(clattn.Error, match="k_scale"):
        idx.run(q, w, cache, k_scale=0.0)

    H = 2
    m = clattn.MlaSparseDecodeWrapper(ctx)
    kl = np.array(lens, np.int32)
    with pytest.raises(clattn.Error, match="512/64"):
        m.plan(indptr, indices, kl, H, 128, 64, P, 0.1, topk)
    with pytest.raises(clattn.Error, match="sm_scale"):
        m.plan(indptr, indices, kl, H, 512, 64, P, None, topk)
    with pytest.raises(clattn.Error, match="topk"):
        m.plan(indptr, indices, kl, H, 512, 64, P, 0.1, 65537, "float32")
    with pytest.raises(clattn.Error, match=r"kv_len_arr\[1\]"):
        m.plan(indptr, indices, np.array([40, 60], np.int32), H, 512, 64, P, 0.1, topk)
    m.plan(indptr, indices, kl, H, 512, 64, P, 0.1, topk, "float32", "bf16")
    qn = np.zeros((2, H, 512), np.float32)
    qp = np.zeros((2, H, 64), np.float32)
    ckv = np.zeros((cache.shape[0], P, 512), np.uint16)
    kpe = np.zeros((cache.shape[0], P, 64), np.uint16)
    lists = np.zeros((2, topk), np.int32)
    with pytest.raises(clattn.Error, match="before plan"):
        clattn.MlaSparseDecodeWrapper(ctx).run(qn, qp, ckv, kpe, lists)
    with pytest.raises(clattn.Error, match="indices: shape"):
        m.run(qn, qp, ckv, kpe, lists[:, :3])
    with pytest.raises(clattn.Error, match="indices: numpy float"):
        m.run(qn, qp, ckv, kpe, lists.astype(np.float32))
    with pytest.raises(clattn.Error, match="kpe_cache: shape"):
        m.run(qn, qp, ckv, kpe[:, :, :32], lists)
    with pytest.raises(clattn.Error, match="q_nope: shape"):
        m.run(qn[:1], qp, ckv, kpe, lists)
    with pytest.raises(clattn.Error, match="kpe_scale"):
        m.run(qn, qp, ckv, kpe, lists, ckv_scale=0.5, kpe_scale=0.25)


def test_dsa_docstrings():
    for obj in (clattn.DsaIndexer, clattn.DsaIndexer.plan, clattn.DsaIndexer.run, clattn.DsaIndexPlan,
                clattn.MlaSparseDecodeWrapper, clattn.MlaSparseDecodeWrapper.plan, clattn.MlaSparseDecodeWrapper.run):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
