import gc

import numpy as np
import pytest

import clattn
import ref


def test_version_devices(ctx):
    assert clattn.version() == clattn.__version__
    devs = clattn.devices()
    assert devs and {"index", "vendor", "device_name", "compute_units", "local_mem_bytes", "fp16",
                     "subgroup_sizes", "extensions"} <= set(devs[0])
    assert ctx.profile["device_name"] == devs[ctx.device_index]["device_name"]
    assert clattn.Context(ctx.device_index).device_name == ctx.device_name
    assert clattn.Context(str(ctx.device_index)).device_name == ctx.device_name
    with pytest.raises(clattn.Error) as ei:
        clattn.Context("no-such-device-xyz")
    assert ei.value.status == "device not found"
    with pytest.raises(clattn.Error):
        clattn.Context(-1)
    with pytest.raises(clattn.Error):
        clattn.Context(1.5)


def test_tensor_roundtrip(ctx, rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    t = ctx.to_device(a)
    assert t.shape == (3, 4, 5) and t.dtype == "f32" and t.nbytes == a.nbytes and len(t) == 3
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(ctx.to_device(a[:, ::2]).numpy(), a[:, ::2])  # non-contiguous: copied
    v = t.view((12, 5))
    assert v.int_ptr == t.int_ptr and v.shape == (12, 5)
    np.testing.assert_array_equal(t.reshape(60).numpy(), a.reshape(-1))
    c = t.clone()
    assert c.int_ptr != t.int_ptr
    t.copy_from(np.zeros_like(a))
    np.testing.assert_array_equal(c.numpy(), a)
    assert not t.numpy().any()
    z = ctx.zeros((2, 2), "i32")
    assert z.numpy().dtype == np.int32 and not z.numpy().any()
    with pytest.raises(clattn.Error, match="view"):
        t.view((7,))
    with pytest.raises(clattn.Error, match="copy_from"):
        t.copy_from(np.zeros(3, np.float32))
    with pytest.raises(clattn.Error, match="bf16"):
        ctx.to_device(np.zeros(3, np.uint16))
    with pytest.raises(clattn.Error, match="not supported"):
        ctx.to_device(np.zeros(3, np.float64))
    with pytest.raises(clattn.Error, match="unknown dtype"):
        ctx.empty((2,), "f33")


def test_bf16_helpers(ctx, rng):
    x = rng.standard_normal(100).astype(np.float32)
    b = clattn.float_to_bf16(x)
    assert b.dtype == np.uint16
    y = clattn.bf16_to_float(b)
    np.testing.assert_allclose(y, x, rtol=2 ** -8)
    assert clattn.float_to_bf16(np.float32(1.0 + 2 ** -8))[()] == 0x3F80  # ties to even
    t = ctx.to_device(b, "bf16")
    assert t.dtype == "bf16"
    np.testing.assert_array_equal(clattn.bf16_to_float(t), y)


def test_dlpack_roundtrip(ctx, rng):
    a = rng.standard_normal((4, 8)).astype(np.float16)
    t = ctx.to_device(a)
    assert t.__dlpack_device__() == (4, ctx.device_index)
    u = clattn.from_dlpack(t)
    assert u.int_ptr == t.int_ptr and u.shape == t.shape and u.dtype == "f16"
    u.copy_from(a * 2)  # writes through the shared buffer
    np.testing.assert_array_equal(t.numpy(), a * 2)
    cap = t.__dlpack__()
    w = clattn.from_dlpack(cap, ctx=ctx)
    with pytest.raises(clattn.Error, match="unconsumed"):
        clattn.from_dlpack(cap, ctx=ctx)  # a capsule is consumed once
    del t, u, cap
    gc.collect()
    np.testing.assert_array_equal(w.numpy(), a * 2)  # the import keeps the buffer alive
    b = ctx.to_device(clattn.float_to_bf16(a), "bf16")
    assert clattn.from_dlpack(b).dtype == "bf16"
    e4 = ctx.zeros((3,), "fp8_e4m3")
    assert clattn.from_dlpack(e4).dtype == "fp8_e4m3"
    dropped = ctx.to_device(a).__dlpack__()  # never consumed: its destructor frees it
    del dropped
    gc.collect()


class _Foreign:
    """A non-OpenCL DLPack producer (device type 1 = CPU)."""

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be called")


def test_dlpack_rejects_other_devices(ctx):
    with pytest.raises(clattn.Error, match="kDLOpenCL"):
        clattn.from_dlpack(_Foreign(), ctx=ctx)


def test_ops_take_dlpack_producers(ctx, rng):
    class Producer:  # e.g. another OpenCL framework exporting a tensor
        def __init__(self, t):
            self.t = t

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream)

    va, vb = rng.standard_normal((2, 2, 3, 64)).astype(np.float32)
    sa, sb = rng.standard_normal((2, 2, 3)).astype(np.float32)
    o, s = clattn.merge_state(Producer(ctx.to_device(va)), Producer(ctx.to_device(sa)), vb, sb, ctx=ctx)
    ro, rs = ref.merge(va, sa, vb, sb)
    np.testing.assert_allclose(o.numpy(), ro, atol=1e-5)
    np.testing.assert_allclose(clattn.from_dlpack(Producer(s), ctx=ctx).numpy(), rs, atol=1e-5)


def test_error_is_runtime_error():
    assert issubclass(clattn.Error, RuntimeError)
    for obj in (clattn.BatchDecodeWithPagedKVCacheWrapper, clattn.BatchDecodeWithPagedKVCacheWrapper.plan,
                clattn.BatchDecodeWithPagedKVCacheWrapper.run, clattn.BatchPrefillWithPagedKVCacheWrapper,
                clattn.BatchPrefillWithRaggedKVCacheWrapper, clattn.BatchMLAPagedAttentionWrapper,
                clattn.merge_state, clattn.merge_states, clattn.chunk_gated_delta_rule, clattn.Context,
                clattn.Tensor, clattn.devices, clattn.build_csr, clattn.validate, clattn.from_dlpack):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj


def test_decode_docstring_example_runs():
    import doctest
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in doctest.DocTestFinder(recurse=False).find(clattn.BatchDecodeWithPagedKVCacheWrapper):
        runner.run(t)
    assert runner.failures == 0 and runner.tries > 5


def test_dlpack_versioned_kwargs(ctx):
    t = ctx.zeros((2,), "f32")
    cap = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(4, ctx.device_index), copy=False)
    assert clattn.from_dlpack(cap, ctx=ctx).shape == (2,)
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(1, 0))
