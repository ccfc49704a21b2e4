#!/usr/bin/env python3
"""A FlashInfer-style decode loop on clattn: a paged KV pool per layer, and per step
append the new token's K/V, re-plan the batch once, run every layer.

    PYTHONPATH=build/python python3 tools/python/decode_loop.py --steps 16 --batch 4

Where FlashInfer code reads ``import flashinfer``, this reads ``import clattn``; the only
other change is that tensors are clattn Tensors (or pyopencl Arrays / DLPack tensors) on a
clattn.Context instead of torch CUDA tensors. The model is random: q, k, v per layer come
from numpy, there are no projections. --check compares the last step with numpy.
"""
import argparse
import time

import numpy as np

import clattn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="clattn device selector (index, vendor, name part)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=37, help="tokens already in the cache per request")
    ap.add_argument("--qo-heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16"])
    ap.add_argument("--check", action="store_true", help="compare the last step with a numpy reference")
    a = ap.parse_args()

    ctx = clattn.Context(a.device)
    print(f"device: {ctx.device_name}  clattn {clattn.version()}")
    npdt = np.float16 if a.dtype == "float16" else np.float32
    rng = np.random.default_rng(0)
    B, P, Hq, Hkv, D = a.batch, a.page_size, a.qo_heads, a.kv_heads, a.head_dim
    max_len = a.prompt + a.steps
    pages_per_req = (max_len + P - 1) // P
    num_pages = B * pages_per_req

    # KV pool per layer (NHD), pages handed out per request in order.
    k_caches = [ctx.zeros((num_pages, P, Hkv, D), a.dtype) for _ in range(a.layers)]
    v_caches = [ctx.zeros((num_pages, P, Hkv, D), a.dtype) for _ in range(a.layers)]
    page_of = [list(range(i * pages_per_req, (i + 1) * pages_per_req)) for i in range(B)]
    host_k = [np.zeros((num_pages, P, Hkv, D), npdt) for _ in range(a.layers)] if a.check else None
    host_v = [np.zeros((num_pages, P, Hkv, D), npdt) for _ in range(a.layers)] if a.check else None

    def csr(seq_lens):
        npg = [(n + P - 1) // P for n in seq_lens]
        indptr = np.concatenate([[0], np.cumsum(npg)]).astype(np.int32)
        indices = np.concatenate([page_of[i][:npg[i]] for i in range(B)]).astype(np.int32)
        last = np.array([n - (p - 1) * P for n, p in zip(seq_lens, npg)], np.int32)
        return indptr, indices, last

    # Prefill stand-in: write the prompt's K/V with the append op.
    seq_lens = np.full(B, a.prompt, np.int32)
    indptr, indices, last = csr(seq_lens)
    append_indptr = np.arange(0, B * a.prompt + 1, a.prompt, dtype=np.int32)
    bi, pos = clattn.get_batch_indices_positions(append_indptr, seq_lens, B * a.prompt)
    for layer in range(a.layers):
        k = rng.standard_normal((B * a.prompt, Hkv, D)).astype(npdt)
        v = rng.standard_normal((B * a.prompt, Hkv, D)).astype(npdt)
        clattn.append_paged_kv_cache(k, v, bi, pos, (k_caches[layer], v_caches[layer]), indices, indptr, last)
        if a.check:
            for t in range(len(bi)):
                pg = indices[indptr[bi[t]] + pos[t] // P]
                host_k[layer][pg, pos[t] % P], host_v[layer][pg, pos[t] % P] = k[t], v[t]

    workspace = ctx.empty((128 << 20,), "u8")  # like FlashInfer's 128 MB float workspace
    wrapper = clattn.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    t_plan, t_run = [], []
    for step in range(a.steps):
        seq_lens = seq_lens + 1
        indptr, indices, last = csr(seq_lens)
        t0 = time.perf_counter()
        wrapper.plan(indptr, indices, last, Hq, Hkv, D, P, q_data_type=a.dtype, kv_data_type=a.dtype)
        t1 = time.perf_counter()
        bi, pos = clattn.get_batch_indices_positions(np.arange(B + 1, dtype=np.int32), seq_lens, B)
        for layer in range(a.layers):
            q = rng.standard_normal((B, Hq, D)).astype(npdt)
            k = rng.standard_normal((B, Hkv, D)).astype(npdt)
            v = rng.standard_normal((B, Hkv, D)).astype(npdt)
            clattn.append_paged_kv_cache(k, v, bi, pos, (k_caches[layer], v_caches[layer]), indices, indptr, last)
            o = wrapper.run(ctx.to_device(q), (k_caches[layer], v_caches[layer]))
            if a.check:
                for t in range(B):
                    pg = indices[indptr[t] + pos[t] // P]
                    host_k[layer][pg, pos[t] % P], host_v[layer][pg, pos[t] % P] = k[t], v[t]
        ctx.finish()
        t2 = time.perf_counter()
        t_plan.append(t1 - t0)
        t_run.append(t2 - t1)
    steady = slice(1, None) if a.steps > 1 else slice(None)  # step 0 builds (or loads) the kernels
    print(f"{a.steps} steps x {a.layers} layers, batch {B}, final kv_len {int(seq_lens[0])}: first step "
          f"{1e3 * (t_plan[0] + t_run[0]):.1f} ms; then median plan {1e3 * np.median(t_plan[steady]):.2f} ms/step, "
          f"append+run {1e3 * np.median(t_run[steady]):.2f} ms/step (host copies of q/k/v included)")

    if a.check:
        got = o.numpy().astype(np.float64)
        layer = a.layers - 1
        err = 0.0
        for i in range(B):
            sel = indices[indptr[i]:indptr[i + 1]]
            kk = np.stack([host_k[layer][sel[t // P], t % P] for t in range(seq_lens[i])]).astype(np.float64)
            vv = np.stack([host_v[layer][sel[t // P], t % P] for t in range(seq_lens[i])]).astype(np.float64)
            for h in range(Hq):
                s = kk[:, h // (Hq // Hkv)] @ q[i, h].astype(np.float64) / np.sqrt(D)
                p = np.exp(s - s.max())
                ref = p @ vv[:, h // (Hq // Hkv)] / p.sum()
                err = max(err, float(np.abs(got[i, h] - ref).max()))
        print(f"check: max |o - numpy| = {err:.2e}")
        if err > 2e-2:
            raise SystemExit("check failed")


if __name__ == "__main__":
    main()
