# torch's CPU scaled_dot_product_attention on the same machine and cores as clattn on PoCL's
# CPU device (issue 24 asks for both in one job): the same shapes as the clattn-bench rows it
# is printed beside, GB/s (decode: K+V+q+o bytes, as clattn-bench decode counts them) and
# TFLOP/s (extend: 4 * D * H * visible (query, key) pairs). torch works on contiguous tensors
# (no paging); GQA through enable_gqa. Threads: torch's default (one per core).
import sys, time, torch, torch.nn.functional as F

def timeit(fn, n):
    for _ in range(2): fn()
    t0 = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t0) / n

def decode(B, S, Hq=32, Hkv=8, D=128, dt=torch.bfloat16):
    q = torch.randn(B, Hq, 1, D, dtype=dt)
    k = torch.randn(B, Hkv, S, D, dtype=dt); v = torch.randn_like(k)
    s = timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 10)
    byt = (2 * B * Hkv * S * D + 2 * B * Hq * D) * q.element_size()
    print(f"torch CPU SDPA {torch.__version__} decode B={B} S={S} Hq={Hq} Hkv={Hkv} D={D} {str(dt)[6:]}: "
          f"{s*1e3:.3f} ms {byt/s/1e9:.1f} GB/s ({torch.get_num_threads()} threads)")

def extend(B, qo, kv, H=32, D=128, dt=torch.float32):
    q = torch.randn(B, H, qo, D, dtype=dt)
    k = torch.randn(B, H, kv, D, dtype=dt); v = torch.randn_like(k)
    kw = {"is_causal": True}
    if qo != kv:
        from torch.nn.attention.bias import causal_lower_right
        kw = {"attn_mask": causal_lower_right(qo, kv)}
    s = timeit(lambda: F.scaled_dot_product_attention(q, k, v, **kw), 3)
    pairs = B * (qo * kv - qo * (qo - 1) / 2)
    print(f"torch CPU SDPA {torch.__version__} extend causal {str(dt)[6:]} {B}x(q{qo},kv{kv}) H={H} D={D}: "
          f"{s*1e3:.3f} ms {4*D*H*pairs/s/1e12:.3f} TFLOP/s ({torch.get_num_threads()} threads)")

for dt in (torch.bfloat16, torch.float32):
    decode(8, 4096, dt=dt)
    decode(16, 2048, dt=dt)
for dt in (torch.float32, torch.bfloat16):
    extend(1, 1024, 1024, dt=dt)
