import numpy as np
import pytest

import clattn
import ref


def test_merge_state(ctx, rng):
    T, H, D = 5, 3, 64
    va, vb = rng.standard_normal((2, T, H, D)).astype(np.float32)
    sa, sb = rng.standard_normal((2, T, H)).astype(np.float32)
    sa[0, 0] = -np.inf  # an empty state
    o, s = clattn.merge_state(ctx.to_device(va), ctx.to_device(sa), vb, sb)
    ro, rs = ref.merge(va, sa, vb, sb)
    np.testing.assert_allclose(o.numpy(), ro, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(s.numpy(), rs, atol=1e-5, rtol=1e-5)
    # in place
    vt, st = ctx.to_device(va), ctx.to_device(sa)
    clattn.merge_state_in_place(vt, st, vb, sb)
    np.testing.assert_allclose(vt.numpy(), ro, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(st.numpy(), rs, atol=1e-5, rtol=1e-5)


def test_merge_states(ctx, rng):
    T, N, H, D = 4, 3, 2, 64
    v = rng.standard_normal((T, N, H, D)).astype(np.float16)
    s = rng.standard_normal((T, N, H)).astype(np.float32)
    o, so = clattn.merge_states(ctx.to_device(v), ctx.to_device(s))
    ro, rs = v[:, 0].astype(np.float64), s[:, 0].astype(np.float64)
    for i in range(1, N):
        ro, rs = ref.merge(ro, rs, v[:, i].astype(np.float64), s[:, i])
    np.testing.assert_allclose(o.numpy().astype(np.float64), ro, atol=5e-3, rtol=5e-3)
    np.testing.assert_allclose(so.numpy(), rs, atol=1e-4, rtol=1e-4)


def test_merge_errors(ctx):
    z = np.zeros((2, 3, 64), np.float32)
    with pytest.raises(clattn.Error, match="s_a: shape"):
        clattn.merge_state(z, np.zeros((2, 4), np.float32), z, np.zeros((2, 3), np.float32))
    with pytest.raises(clattn.Error, match="v_b: dtype"):
        clattn.merge_state(z, np.zeros((2, 3), np.float32), z.astype(np.float16), np.zeros((2, 3), np.float32))
    with pytest.raises(clattn.Error, match="v_a: dtype"):
        clattn.merge_state(z.astype(np.int32), np.zeros((2, 3), np.float32), z, np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_append_paged_kv_cache(ctx, rng, layout):
    P, Hkv, D = 16, 2, 64
    seq_lens = np.array([5, 20], np.int32)
    append_lens = np.array([2, 20], np.int32)
    indptr, indices, last, num_pages = ref.make_csr(rng, list(seq_lens), P)
    append_indptr = np.concatenate([[0], np.cumsum(append_lens)]).astype(np.int32)
    nnz = int(append_indptr[-1])
    k_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    v_new = rng.standard_normal((nnz, Hkv, D)).astype(np.float32)
    shape = (num_pages, P, Hkv, D) if layout == "NHD" else (num_pages, Hkv, P, D)
    k_cache, v_cache = ctx.zeros(shape, "f16"), ctx.zeros(shape, "f16")
    bi, pos = clattn.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    clattn.append_paged_kv_cache(k_new, v_new, bi, pos, (k_cache, v_cache), indices, indptr, last, layout)
    kc, vc = k_cache.numpy(), v_cache.numpy()
    for t in range(nnz):
        b, p = bi[t], pos[t]
        page = indices[indptr[b] + p // P]
        got_k = kc[page, p % P] if layout == "NHD" else kc[page, :, p % P]
        got_v = vc[page, p % P] if layout == "NHD" else vc[page, :, p % P]
        np.testing.assert_allclose(got_k, k_new[t].astype(np.float16))
        np.testing.assert_allclose(got_v, v_new[t].astype(np.float16))


def test_append_kv_slots_and_errors(ctx, rng):
    P, Hkv, D, num_pages = 16, 2, 64, 4
    k_cache, v_cache = ctx.zeros((num_pages, P, Hkv, D), "f32"), ctx.zeros((num_pages, P, Hkv, D), "f32")
    k = rng.standard_normal((3, Hkv, D)).astype(np.float32)
    slots = np.array([5, -1, 63], np.int64)
    clattn.append_kv(k, k * 2, slots, k_cache, v_cache)
    kc, vc = k_cache.numpy(), v_cache.numpy()
    np.testing.assert_array_equal(kc[0, 5], k[0])
    np.testing.assert_array_equal(vc[3, 15], 2 * k[2])
    assert np.count_nonzero(kc) == 2 * Hkv * D
    with pytest.raises(clattn.Error, match="slot"):
        clattn.append_kv(k, k, np.array([5, 6, 64]), k_cache, v_cache)
    assert np.count_nonzero(k_cache.numpy()) == 2 * Hkv * D  # rejected call wrote nothing
    with pytest.raises(clattn.Error, match="append_key"):
        clattn.append_kv(k[:, :1], k[:, :1], slots, k_cache, v_cache)
