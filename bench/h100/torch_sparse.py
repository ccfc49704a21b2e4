# torch as the same-job peer of `clattn-bench sparse` on the GPU: the shapes done the
# way a torch engine would without a sparse kernel (SGLang's HSA selector reference, then a
# gather and SDPA; DSA as a gather and two matmuls), bf16, timed with CUDA events (mean of 20
# calls after 3 warm-ups). Usage: python3 bench/h100/torch_sparse.py
import torch, torch.nn.functional as F

def timed(f, n=20):
    for _ in range(3): f()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); torch.cuda.synchronize(); s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n

def hsa(B=64, S=32768, Hq=32, Hkv=8, D=128, P=64, K=64):
    G, npg = Hq // Hkv, S // P
    dev, dt = "cuda", torch.bfloat16
    kc = torch.randn(B * npg, Hkv, P, D, device=dev, dtype=dt)  # HND pages: one gather per (page, head)
    vc = torch.randn_like(kc)
    table = torch.randperm(B * npg, device=dev).view(B, npg)
    q = torch.randn(B, Hq, D, device=dev, dtype=dt)
    scale = D ** -0.5
    heads = torch.arange(Hkv, device=dev).view(1, Hkv, 1)

    def select():
        lmk = kc[table, :, P - 1, :]                                         # [B, C, Hkv, D]
        qs = q.view(B, Hkv, G, D).sum(2).float()
        sc = torch.einsum("bhd,bchd->bhc", qs, lmk.float()) * scale          # [B, Hkv, C]
        idx = sc.topk(K, dim=-1).indices
        return torch.gather(table.unsqueeze(1).expand(B, Hkv, npg), 2, idx)  # [B, Hkv, K] page ids

    def decode(pages):
        k = kc[pages, heads].reshape(B, Hkv, K * P, D)                       # [B, Hkv, K*P, D]
        v = vc[pages, heads].reshape(B, Hkv, K * P, D)
        return F.scaled_dot_product_attention(q.view(B, Hkv, G, D), k, v, scale=scale)

    pages = select()
    t_sel = timed(select)
    t_dec = timed(lambda: decode(pages))
    t_run = timed(lambda: decode(select()))
    kd = kc.view(B, npg, Hkv, P, D).permute(0, 2, 1, 3, 4).reshape(B, Hkv, S, D)  # contiguous dense copy
    vd = vc.view(B, npg, Hkv, P, D).permute(0, 2, 1, 3, 4).reshape(B, Hkv, S, D)
    t_dense = timed(lambda: F.scaled_dot_product_attention(q.view(B, Hkv, G, D), kd, vd, scale=scale))
    sel_bytes = 2 * B * Hkv * K * P * D * 2
    print(f"torch {torch.__version__} HSA group B={B} S={S} Hq={Hq} Hkv={Hkv} D={D} P={P} topk={K}: "
          f"select {t_sel:.3f} ms, gather+SDPA {t_dec:.3f} ms ({sel_bytes / t_dec / 1e6:.0f} GB/s of selected K+V), "
          f"run {t_run:.3f} ms = {100 * t_run / t_dense:.1f} % of dense SDPA {t_dense:.3f} ms (contiguous K/V)")

def dsa(B=64, S=32768, H=16, topk=2048, P=64):
    dev, dt = "cuda", torch.bfloat16
    latent = torch.randn(B * S, 576, device=dev, dtype=dt)               # slot-major latent cache
    table = torch.randperm(B * (S // P), device=dev).view(B, S // P)
    pos = torch.stack([torch.randperm(S, device=dev)[:topk].sort().values for _ in range(B)])
    slots = (torch.gather(table, 1, pos // P) * P + pos % P)              # [B, topk]
    qn = torch.randn(B, H, 576, device=dev, dtype=dt)
    scale = 192 ** -0.5

    def run():
        kv = latent[slots]                                                # [B, topk, 576]
        s = torch.bmm(qn, kv.transpose(1, 2)).float() * scale             # [B, H, topk]
        p = torch.softmax(s, -1).to(dt)
        return torch.bmm(p, kv[..., :512])

    t = timed(run)
    nbytes = B * topk * 576 * 2
    print(f"torch {torch.__version__} sparse MLA B={B} S={S} H={H} topk={topk}: gather+bmm {t:.3f} ms "
          f"({nbytes / t / 1e6:.0f} GB/s of listed latent rows)")

for f in (hsa, dsa):
    try: f()
    except Exception as ex: print("torch", f.__name__, "failed:", ex)
