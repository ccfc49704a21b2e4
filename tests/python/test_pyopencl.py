"""Zero-copy interop with pyopencl: adopted context/queue, Arrays, Buffers, raw cl_mem ints."""
import numpy as np
import pytest

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")

import clattn  # noqa: E402
import ref  # noqa: E402


@pytest.fixture(scope="module")
def clq(ctx):
    # pyopencl objects on the same device as the clattn test context.
    dev = cl.Device.from_int_ptr(ctx.cl_device)
    c = cl.Context([dev])
    return c, cl.CommandQueue(c)


def test_adopt_and_decode_zero_copy(clq, rng):
    c, q = clq
    actx = clattn.Context((c, q))
    assert actx.cl_context == c.int_ptr and actx.cl_queue == q.int_ptr
    kv_lens, Hq, Hkv, D, P = [7, 30], 4, 2, 64, 16
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    qh = rng.standard_normal((2, Hq, D)).astype(np.float32)
    k_d, v_d, q_d = cla.to_device(q, k), cla.to_device(q, v), cla.to_device(q, qh)
    out = cla.zeros(q, (2, Hq, D), np.float32)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(actx)
    w.plan(cla.to_device(q, indptr), cla.to_device(q, indices), last, Hq, Hkv, D, P, q_data_type="float32")
    o = w.run(q_d, (k_d, v_d), out=out)
    assert o.int_ptr == out.base_data.int_ptr  # wrote into the caller's Array
    got = out.get()
    for i, n in enumerate(kv_lens):
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, _ = ref.attention(qh[i:i + 1], ref.gather_pages(k, sel, n), ref.gather_pages(v, sel, n))
        np.testing.assert_allclose(got[i], ro[0], atol=2e-3, rtol=2e-3)


def test_buffers_and_handles(clq, rng):
    c, q = clq
    actx = clattn.Context((c, q))
    a = rng.standard_normal((3, 2, 64)).astype(np.float32)
    s = rng.standard_normal((3, 2)).astype(np.float32)
    mf = cl.mem_flags
    buf = cl.Buffer(c, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
    t = actx.wrap(buf, (3, 2, 64), "f32")
    assert t.int_ptr == buf.int_ptr
    np.testing.assert_array_equal(t.numpy(), a)
    h = actx.wrap(buf.int_ptr, (3, 2, 64), "f32")  # raw cl_mem int
    np.testing.assert_array_equal(h.numpy(), a)
    # Ops accept Buffers / ints with explicit shape and dtype through wrap, Arrays directly.
    s_d = cla.to_device(q, s)
    o, so = clattn.merge_state(t, s_d, h, s_d)
    np.testing.assert_allclose(o.numpy(), a, atol=1e-5)
    np.testing.assert_allclose(so.numpy(), s + 1.0, atol=1e-5)  # base-2 LSE
    # tensor -> pyopencl view of the same memory
    back = cl.Buffer.from_int_ptr(o.int_ptr, retain=True)
    host = np.empty_like(a)
    cl.enqueue_copy(q, host, back)
    np.testing.assert_allclose(host, a, atol=1e-5)


def test_pyopencl_errors(clq, ctx):
    c, q = clq
    actx = clattn.Context((c, q))
    big = cla.zeros(q, (4, 2, 64), np.float32)
    s = cla.zeros(q, (2, 2), np.float32)
    with pytest.raises(clattn.Error, match="non-contiguous"):
        clattn.merge_state(big[::2], s, big[::2], s)
    with pytest.raises(clattn.Error, match="offset"):
        clattn.merge_state(big[2:], s, big[2:], s)
    buf = cl.Buffer(c, cl.mem_flags.READ_WRITE, 64)
    with pytest.raises(clattn.Error, match="needs 128 bytes"):
        actx.wrap(buf, (32,), "f32")
    with pytest.raises(clattn.Error, match="another OpenCL context"):
        ctx.wrap(buf, (16,), "f32")
    with pytest.raises(clattn.Error, match="explicit shape and dtype"):
        clattn.merge_state(buf, s, buf, s, ctx=actx)
    with pytest.raises(clattn.Error, match="another OpenCL context"):
        clattn.merge_state(ctx.zeros((2, 2, 64)), s, big[:2], s)


def test_wrappers_take_raw_buffers(clq, rng):
    """Buffers and cl_mem ints without shape: the wrapper supplies it from the plan (the
    cache's page count from the buffer size)."""
    c, q = clq
    actx = clattn.Context((c, q))
    kv_lens, Hq, Hkv, D, P = [19], 2, 1, 64, 16
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    k = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((num_pages, P, Hkv, D)).astype(np.float32)
    qh = rng.standard_normal((1, Hq, D)).astype(np.float32)
    mf = cl.mem_flags
    kb = cl.Buffer(c, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=k)
    vb = cl.Buffer(c, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=v)
    qb = cl.Buffer(c, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=qh)
    ob = cl.Buffer(c, mf.READ_WRITE, qh.nbytes)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(actx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32")
    w.run(qb, (kb.int_ptr, vb), out=ob.int_ptr)
    got = np.empty_like(qh)
    cl.enqueue_copy(q, got, ob)
    ro, _ = ref.attention(qh, ref.gather_pages(k, indices, 19), ref.gather_pages(v, indices, 19))
    np.testing.assert_allclose(got, ro, atol=2e-3, rtol=2e-3)
