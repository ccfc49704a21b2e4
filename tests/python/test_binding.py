"""The native entry points' argument handling (issue 26 item 1): decode and extend runs
with the optional buffers left out (lse=None, sinks=None, no workspace), as in the report's
minimal repro, and non-tensor objects where tensors belong."""
import numpy as np
import pytest

import clattn
from clattn import _clattn
import ref


def _repro_case(rng, T_per_req):
    P, Hq, Hkv, D = 16, 4, 1, 64
    indptr = np.array([0, 2, 3], np.int32)
    indices = np.array([0, 1, 2], np.int32)
    last = np.array([5, 16], np.int32)
    k = rng.standard_normal((3, P, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((3, P, Hkv, D)).astype(np.float32)
    q = rng.standard_normal((sum(T_per_req), Hq, D)).astype(np.float32)
    return P, Hq, Hkv, D, indptr, indices, last, k, v, q


def _check(o, q, k, v, indptr, indices, last, qo, P):
    for i in range(len(last)):
        n = (indptr[i + 1] - indptr[i] - 1) * P + last[i]
        sel = indices[indptr[i]:indptr[i + 1]]
        ro, _ = ref.attention(q[qo[i]:qo[i + 1]], ref.gather_pages(k, sel, n), ref.gather_pages(v, sel, n),
                              causal=True)
        np.testing.assert_allclose(o[qo[i]:qo[i + 1]], ro, atol=2e-3, rtol=2e-3)


def test_decode_run_repro_lse_and_sinks_none(ctx, rng):
    P, Hq, Hkv, D, indptr, indices, last, k, v, q = _repro_case(rng, [1, 1])
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, "NHD")
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32", kv_data_type="float32")
    o = w.run(ctx.to_device(q), (ctx.to_device(k), ctx.to_device(v)))
    _check(o.numpy(), q, k, v, indptr, indices, last, [0, 1, 2], P)


def test_extend_run_repro_lse_and_sinks_none(ctx, rng):
    P, Hq, Hkv, D, indptr, indices, last, k, v, q = _repro_case(rng, [3, 2])
    qo = np.array([0, 3, 5], np.int32)
    w = clattn.BatchPrefillWithPagedKVCacheWrapper(ctx, "NHD")
    w.plan(qo, indptr, indices, last, Hq, Hkv, D, P, causal=True, q_data_type="float32", kv_data_type="float32")
    o = w.run(ctx.to_device(q), (ctx.to_device(k), ctx.to_device(v)))
    _check(o.numpy(), q, k, v, indptr, indices, last, qo, P)


def test_native_run_rejects_non_tensors_by_name(ctx, rng):
    P, Hq, Hkv, D, indptr, indices, last, k, v, q = _repro_case(rng, [1, 1])
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, "NHD")
    w.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type="float32")
    qt, kt, vt = ctx.to_device(q), ctx.to_device(k), ctx.to_device(v)
    out = ctx.empty((2, Hq, D))
    args = [ctx, w._plan, qt, kt, vt, w._indices, out, None, None, None, 1.0, 1.0]
    _clattn._decode_run(*args)  # the optional ones (lse, workspace, sinks) may be None
    for i, name in [(2, "q"), (6, "out"), (7, "lse"), (9, "sinks")]:
        bad = list(args)
        bad[i] = q  # a numpy array where a device tensor belongs
        with pytest.raises(clattn.Error, match=f"^{name}: expected a clattn.Tensor, got ndarray"):
            _clattn._decode_run(*bad)
    with pytest.raises(clattn.Error, match="v_a is required"):
        _clattn._merge_state(ctx, None, None, None, None, None, None)


def test_fresh_interpreter_importing_clattn_first_opens_every_device():
    """The module loaded before any other libstdc++ user, then every driver initialised: a
    libclattn exporting the C++ runtime's symbols crashed here (SIGSEGV in the driver's LLVM
    std::call_once; ctest exported_symbols checks the exports themselves)."""
    import os
    import subprocess
    import sys
    code = ("import clattn\n"
            "for d in clattn.devices():\n"
            "    clattn.Context(d['index'])\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
