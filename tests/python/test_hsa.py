"""HsaDecodeWrapper (hierarchical sparse attention) against a float64 numpy reference written
here from include/clattn/sparse.hpp: selection by landmark scores (ties to the earlier
candidate, candidate order, -1 / -inf padding), the union of window and selected keys,
softmax. q and K hold small integers, so every landmark score is an exact integer times
sm_scale on the device and here: selections (ties included) are compared exactly."""
import numpy as np
import pytest

import clattn
import ref

SCALE = 0.05


def _batch(rng, lens, Hq, Hkv, D, P, layout="NHD"):
    indptr, indices, last, num_pages = ref.make_csr(rng, lens, P)
    shape = (num_pages, P, Hkv, D)
    k = rng.integers(-3, 4, shape).astype(np.float32)
    v = rng.standard_normal(shape).astype(np.float32)
    q = rng.integers(-2, 3, (len(lens), Hq, D)).astype(np.float32)
    return indptr, indices, last, num_pages, q, k, v


def _pages(indptr, indices, i):
    return indices[indptr[i]:indptr[i + 1]]


def ref_select(q, k, pages, L, P, topk, strategy, W, scale=SCALE, cand=None, cand_valid=None):
    """One request: (ids [H_sel, topk] physical, scores [H_sel, topk]). cand: explicit
    candidate page ids (replacing the request's completed pages before the window)."""
    Hq, D = q.shape
    Hkv = k.shape[2]
    G = Hq // Hkv
    if cand is None:
        cut = max(0, L - W) if W > 0 else L
        cand = pages[:cut // P]
        cand_valid = np.ones(len(cand), bool)
    nsel = Hq if strategy == "head" else Hkv
    ids = np.full((nsel, topk), -1, np.int32)
    sc = np.full((nsel, topk), -np.inf)
    qd, kd = q.astype(np.float64), k.astype(np.float64)
    for h in range(nsel):
        kvh, qv = (h // G, qd[h]) if strategy == "head" else (h, qd[h * G:(h + 1) * G].sum(0))
        s = [float(kd[c, P - 1, kvh] @ qv) * scale if ok else None for c, ok in zip(cand, cand_valid)]
        best = sorted((c for c in range(len(cand)) if s[c] is not None), key=lambda c: (-s[c], c))[:topk]
        for j, c in enumerate(sorted(best)):
            ids[h, j], sc[h, j] = cand[c], s[c]
    return ids, sc


def ref_decode(q, k, v, pages, L, P, ids, W, fuse, num_pages, scale=SCALE):
    """One request over the selection ids [H_sel, topk]: o [Hq, D], natural lse [Hq]."""
    Hq, D = q.shape
    Hkv = k.shape[2]
    G, nsel = Hq // Hkv, ids.shape[0]
    cut = max(0, L - W) if W > 0 else L
    o, lse = np.zeros((Hq, D)), np.full(Hq, -np.inf)
    for h in range(Hq):
        sel = {int(x) for x in ids[h // (Hq // nsel)] if 0 <= x < num_pages}
        keys = [t for t in range(L) if (fuse and W > 0 and t >= cut) or (t < cut and int(pages[t // P]) in sel)]
        if not keys:
            continue
        kk = np.stack([k[pages[t // P], t % P, h // G] for t in keys]).astype(np.float64)
        vv = np.stack([v[pages[t // P], t % P, h // G] for t in keys]).astype(np.float64)
        s = kk @ q[h].astype(np.float64) * scale
        m = s.max()
        p = np.exp(s - m)
        o[h] = p @ vv / p.sum()
        lse[h] = m + np.log(p.sum())
    return o, lse


def _check_attention(o, lse, want_o, want_lse, tol):
    np.testing.assert_allclose(o, want_o, atol=tol, rtol=tol)
    fin = np.isfinite(want_lse)
    assert np.all(np.isneginf(lse[~fin])), lse
    np.testing.assert_allclose(lse[fin], want_lse[fin] * ref.LOG2E, atol=tol, rtol=tol)


@pytest.mark.parametrize("P,lens,W", [(16, [130, 5, 64, 37], 40), (64, [400, 64, 63, 200], 100)])
@pytest.mark.parametrize("strategy", ["group", "head"])
@pytest.mark.parametrize("window,fuse", [(False, True), (True, True), (True, False)])
def test_hsa_run_matches_reference(ctx, rng, P, lens, W, strategy, window, fuse):
    Hq, Hkv, D, topk = 8, 2, 64, 3
    W = W if window else 0
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    pg0 = _pages(indptr, indices, 0)
    k[pg0, P - 1] = k[pg0[0], P - 1]  # request 0: every landmark score ties (more candidates than topk)
    w = clattn.HsaDecodeWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, topk, selection_strategy=strategy, window_size=W, fuse_window=fuse,
           sm_scale=SCALE, q_data_type="float32")
    info = w.plan_info
    nsel = Hq if strategy == "head" else Hkv
    assert info.num_sel_heads == nsel and info.topk == topk and info.selection_strategy == strategy
    assert list(info.num_candidates) == [(max(0, L - W) if W else L) // P for L in lens]
    ids, scores = w.select(q, k)
    assert ids.shape == (len(lens), nsel, topk) and ids.dtype == "i32" and scores.dtype == "f32"
    ids, scores = ids.numpy(), scores.numpy()
    o, lse = w.run(q, k, v, return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    for i, L in enumerate(lens):
        pg = _pages(indptr, indices, i)
        want_ids, want_sc = ref_select(q[i], k, pg, L, P, topk, strategy, W)
        np.testing.assert_array_equal(ids[i], want_ids, err_msg=f"request {i}")
        fin = np.isfinite(want_sc)
        assert np.all(np.isneginf(scores[i][~fin]))
        np.testing.assert_allclose(scores[i][fin], want_sc[fin], rtol=1e-5, atol=1e-5)
        want_o, want_lse = ref_decode(q[i], k, v, pg, L, P, want_ids, W, fuse, num_pages)
        _check_attention(o[i], lse[i], want_o, want_lse, 1e-4)


def test_hsa_select_then_decode_equals_run(ctx, rng):
    lens, Hq, Hkv, D, P = [90, 33, 160], 4, 2, 64, 16
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    w = clattn.HsaDecodeWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, 2, "head", 24, q_data_type="float32")
    o_run, lse_run = w.run(q, (k, v), return_lse=True, return_lse_base_on_e=True)
    ids, _ = w.select(q, k)
    o_dec, lse_dec = w.run(q, k, v, selected_page_ids=ids, return_lse=True, return_lse_base_on_e=True)
    np.testing.assert_array_equal(o_dec.numpy(), o_run.numpy())
    np.testing.assert_array_equal(lse_dec.numpy(), lse_run.numpy())
    # numpy destinations are written in place
    out_ids = np.zeros((3, Hq, 2), np.int32)
    out_o = np.zeros((3, Hq, D), np.float32)
    got, _ = w.select(q, k, out_page_ids=out_ids)
    assert got is out_ids
    np.testing.assert_array_equal(out_ids, ids.numpy())
    assert w.run(q, k, v, out=out_o) is out_o
    np.testing.assert_array_equal(out_o, o_run.numpy())


def test_hsa_unfused_merged_with_window_equals_fused(ctx, rng):
    """fuse_window=False leaves the window to a dense windowed decode; merging the two by
    their LSEs gives the fused call's result."""
    lens, Hq, Hkv, D, P, W = [150, 45, 70], 8, 2, 64, 16, 24
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    outs = {}
    for fuse in (True, False):
        w = clattn.HsaDecodeWrapper(ctx)
        w.plan(indptr, indices, last, Hq, Hkv, D, P, 3, "group", W, fuse, q_data_type="float32")
        outs[fuse] = w.run(q, k, v, return_lse=True)
    dense = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    dense.plan(indptr, indices, last, Hq, Hkv, D, P, window_left=W - 1, q_data_type="float32")
    o_w, lse_w = dense.run(q, (k, v), return_lse=True)
    o_m, lse_m = clattn.merge_state(outs[False][0], outs[False][1], o_w, lse_w)
    np.testing.assert_allclose(o_m.numpy(), outs[True][0].numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(lse_m.numpy(), outs[True][1].numpy(), atol=1e-4, rtol=1e-4)


def test_hsa_page_table_hnd_bf16(ctx, rng):
    lens, Hq, Hkv, D, P, W, topk = [130, 7, 64], 4, 1, 128, 16, 20, 3
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    v = clattn.bf16_to_float(clattn.float_to_bf16(v))  # q and k are integers: exact in bf16
    width = max(np.diff(indptr))
    table = np.full((len(lens), width), -1, np.int32)
    for i in range(len(lens)):
        pg = _pages(indptr, indices, i)
        table[i, :len(pg)] = pg
    w = clattn.HsaDecodeWrapper(ctx, "HND")
    w.plan(None, None, None, Hq, Hkv, D, P, topk, "group", W, q_data_type="bf16", o_data_type="float32",
           sm_scale=SCALE, block_tables=table, seq_lens=np.array(lens, np.int32))
    assert w.plan_info.page_table
    hnd = lambda x: clattn.float_to_bf16(np.ascontiguousarray(x.transpose(0, 2, 1, 3)))
    o, lse = w.run(clattn.float_to_bf16(q), hnd(k), hnd(v), return_lse=True)
    ids, _ = w.select(clattn.float_to_bf16(q), hnd(k))
    o, lse, ids = o.numpy(), lse.numpy(), ids.numpy()
    for i, L in enumerate(lens):
        pg = _pages(indptr, indices, i)
        want_ids, _ = ref_select(q[i], k, pg, L, P, topk, "group", W)
        np.testing.assert_array_equal(ids[i], want_ids)
        want_o, want_lse = ref_decode(q[i], k, v, pg, L, P, want_ids, W, True, num_pages)
        _check_attention(o[i], lse[i], want_o, want_lse, 1e-4)


@pytest.mark.parametrize("fuse", [True, False])
def test_hsa_given_selection_edge_ids(ctx, rng, fuse):
    """A caller's selection: -1, an id outside the cache, a repeat, the partial last page
    and a page inside the window each add their keys before the window once (or nothing)."""
    lens, Hq, Hkv, D, P, W, topk = [150, 45, 16], 4, 2, 64, 16, 24, 6
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    w = clattn.HsaDecodeWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, topk, "head", W, fuse, sm_scale=SCALE, q_data_type="float32")
    sel = np.full((len(lens), Hq, topk), -1, np.int32)
    for i in range(len(lens)):
        pg = _pages(indptr, indices, i)
        for h in range(Hq):
            sel[i, h, :5] = [pg[(h + i) % len(pg)], pg[-1], pg[-2] if len(pg) > 1 else -1, pg[(h + i) % len(pg)],
                             num_pages + 5]
    o, lse = w.run(q, k, v, selected_page_ids=sel, return_lse=True)
    o, lse = o.numpy(), lse.numpy()
    for i, L in enumerate(lens):
        want_o, want_lse = ref_decode(q[i], k, v, _pages(indptr, indices, i), L, P, sel[i], W, fuse, num_pages)
        _check_attention(o[i], lse[i], want_o, want_lse, 1e-4)


@pytest.mark.parametrize("give_num_pages", [False, True])
def test_hsa_explicit_candidates(ctx, rng, give_num_pages):
    """Explicit candidates with a mask, one of them a page past every planned page id: a
    real candidate of the cache (planned for the cache's size, given or taken at select)."""
    lens, Hq, Hkv, D, P, topk, C = [200, 90], 8, 2, 64, 16, 3, 6
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    k = np.concatenate([k, np.zeros((2,) + k.shape[1:], np.float32)])
    extra = num_pages + 1
    for h in range(Hkv):  # its landmark scores highest in every group
        k[extra, P - 1, h] = 3 * np.sign(q[0, h * 4:(h + 1) * 4].sum(0))
    cand = np.full((2, C), -1, np.int32)
    for i in range(2):
        pg = _pages(indptr, indices, i)[:C]
        cand[i, :len(pg)] = pg
    cand[0, C - 1] = extra
    mask = np.ones((2, C), bool)
    mask[:, 1] = False
    w = clattn.HsaDecodeWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, topk, sm_scale=SCALE, q_data_type="float32", num_candidates=C,
           num_pages=k.shape[0] if give_num_pages else None)
    ids, scores = w.select(q, k, candidates=cand, candidate_mask=mask)
    ids, scores = ids.numpy(), scores.numpy()
    assert np.all(ids[0, :, -1] == extra)
    for i in range(2):
        valid = (cand[i] >= 0) & mask[i]
        want_ids, want_sc = ref_select(q[i], k, None, lens[i], P, topk, "group", 0, cand=cand[i], cand_valid=valid)
        np.testing.assert_array_equal(ids[i], want_ids)
        np.testing.assert_allclose(scores[i], want_sc, rtol=1e-5)
    with pytest.raises(clattn.Error, match="candidates: required"):
        w.select(q, k)


def test_hsa_errors(ctx, rng):
    lens, Hq, Hkv, D, P = [40, 20], 4, 2, 64, 16
    indptr, indices, last, num_pages, q, k, v = _batch(rng, lens, Hq, Hkv, D, P)
    w = clattn.HsaDecodeWrapper(ctx)
    with pytest.raises(clattn.Error, match="before plan"):
        w.run(q, k, v)
    with pytest.raises(clattn.Error, match="selection_strategy"):
        w.plan(indptr, indices, last, Hq, Hkv, D, P, 2, "tokens")
    with pytest.raises(clattn.Error, match="topk") as ei:
        w.plan(indptr, indices, last, Hq, Hkv, D, P, 0, q_data_type="float32")
    assert ei.value.status == "invalid argument"
    with pytest.raises(clattn.Error, match="window_size"):
        w.plan(indptr, indices, last, Hq, Hkv, D, P, 2, window_size=-4, q_data_type="float32")
    with pytest.raises(clattn.Error, match="one metadata form"):
        w.plan(indptr, indices, last, Hq, Hkv, D, P, 2, block_tables=np.zeros((2, 3), np.int32), seq_lens=lens)
    bad = indices.copy()
    bad[0] = -7
    with pytest.raises(clattn.Error, match="kv_indices"):
        w.plan(indptr, bad, last, Hq, Hkv, D, P, 2, q_data_type="float32", num_pages=num_pages)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, 2, q_data_type="float32")
    with pytest.raises(clattn.Error, match="q: shape"):
        w.run(q[:1], k, v)
    with pytest.raises(clattn.Error, match="selected_page_ids: shape"):
        w.run(q, k, v, selected_page_ids=np.zeros((2, Hq, 2), np.int32))
    with pytest.raises(clattn.Error, match="candidates"):
        w.select(q, k, candidates=np.zeros((2, 4), np.int32))
    with pytest.raises(clattn.Error, match="v_cache"):
        w.run(q, k)
    with pytest.raises(clattn.Error, match="k_cache: shape"):
        w.run(q, k[:, :8], v[:, :8])


def test_hsa_docstrings():
    for obj in (clattn.HsaDecodeWrapper, clattn.HsaDecodeWrapper.plan, clattn.HsaDecodeWrapper.select,
                clattn.HsaDecodeWrapper.run, clattn.HsaPlan):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
