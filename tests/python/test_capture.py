"""clattn.Capture: a decode call recorded once and replayed with new data in the same
buffers gives the bits of a direct call; misuse raises clattn.Error."""
import numpy as np
import pytest

import clattn
import ref


@pytest.mark.parametrize("command_buffer", [True, False])
def test_capture_replay_decode(ctx, rng, command_buffer):
    kv_lens, Hq, Hkv, D, P = [9, 40, 3], 4, 2, 64, 16
    indptr, indices, last, num_pages = ref.make_csr(rng, kv_lens, P)
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx)
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32")
    shape = (num_pages, P, Hkv, D)
    q = ctx.to_device(rng.standard_normal((3, Hq, D)).astype(np.float32))
    k = ctx.to_device(rng.standard_normal(shape).astype(np.float32))
    v = ctx.to_device(rng.standard_normal(shape).astype(np.float32))
    out = ctx.empty((3, Hq, D), "f32")
    cap = clattn.Capture(ctx, command_buffer=command_buffer)
    with cap:
        w.run(q, (k, v), out=out)
    assert cap.launches >= 1
    if not command_buffer:
        assert not cap.uses_command_buffer
    direct = ctx.empty((3, Hq, D), "f32")
    for _ in range(3):  # new data in the captured buffers, then replay
        qn = rng.standard_normal((3, Hq, D)).astype(np.float32)
        q.copy_from(qn)
        cap.replay()
        w.run(q, (k, v), out=direct)
        got = out.numpy()
        np.testing.assert_array_equal(got, direct.numpy())
        kk, vv = k.numpy(), v.numpy()
        for i, n in enumerate(kv_lens):
            sel = indices[indptr[i]:indptr[i + 1]]
            ro, _ = ref.attention(qn[i:i + 1], ref.gather_pages(kk, sel, n), ref.gather_pages(vv, sel, n))
            np.testing.assert_allclose(got[i], ro[0], atol=2e-3, rtol=2e-3)


def test_capture_misuse(ctx):
    cap = clattn.Capture(ctx)
    with pytest.raises(clattn.Error, match="before Capture::end"):
        cap.replay()
    with pytest.raises(clattn.Error, match="without Capture::begin"):
        cap.end()
    assert isinstance(clattn.command_buffer_version(ctx), str)
