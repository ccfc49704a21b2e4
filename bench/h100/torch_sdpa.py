# torch's scaled_dot_product_attention on the same GPU, in the same job as clattn-bench
# extend (issue 5 asks for both): its three cases, fp16, H=32, D=128, causal (lower-right
# aligned when q is shorter than kv, as clattn's extend), FLOPs counted as clattn-bench does
# (4 * D * H * visible (query, key) pairs). Run by bench/h100/h100-pass.sh when torch imports.
import torch, torch.nn.functional as F
def run(B, qo, kv, H=32, D=128):
    q = torch.randn(B, H, qo, D, device="cuda", dtype=torch.float16)
    k = torch.randn(B, H, kv, D, device="cuda", dtype=torch.float16); v = torch.randn_like(k)
    kw = {"is_causal": True}
    if qo != kv:
        from torch.nn.attention.bias import causal_lower_right
        kw = {"attn_mask": causal_lower_right(qo, kv)}
    for _ in range(3): F.scaled_dot_product_attention(q, k, v, **kw)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); torch.cuda.synchronize(); s.record()
    n = 20
    for _ in range(n): F.scaled_dot_product_attention(q, k, v, **kw)
    e.record(); torch.cuda.synchronize(); ms = s.elapsed_time(e) / n
    pairs = B * (qo * kv - qo * (qo - 1) / 2)
    print(f"torch SDPA {torch.__version__} causal fp16 {B}x(q{qo},kv{kv}) H={H} D={D}: {ms:.3f} ms {4*D*H*pairs/ms/1e9:.1f} TFLOP/s")
for c in [(1, 4096, 4096), (1, 16384, 16384), (8, 1024, 2048)]:
    try: run(*c)
    except Exception as ex: print("torch SDPA", c, "failed:", ex)
