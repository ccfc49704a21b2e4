"""Small float64 numpy references for the clattn ops (plain loops over logical sequences)."""
import numpy as np


def attention(q, k, v, sm_scale=None, causal=False, window_left=-1, soft_cap=0.0, mask=None, sinks=None):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D] -> o [Lq, Hq, D], lse [Lq, Hq] (natural log).
    Query row j sits at position Lk - Lq + j (causal alignment to the end)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    Lq, Hq, D = q.shape
    Lk, Hkv, _ = k.shape
    g = Hq // Hkv
    scale = 1.0 / np.sqrt(D) if not sm_scale else sm_scale
    o = np.zeros((Lq, Hq, v.shape[2]))
    lse = np.full((Lq, Hq), -np.inf)
    for h in range(Hq):
        s = q[:, h, :] @ k[:, h // g, :].T * scale
        if soft_cap:
            s = soft_cap * np.tanh(s / soft_cap)
        allow = np.ones((Lq, Lk), bool)
        pos = Lk - Lq + np.arange(Lq)[:, None]
        kp = np.arange(Lk)[None, :]
        if causal:
            allow &= kp <= pos
        if window_left >= 0:
            allow &= kp >= pos - window_left
        if mask is not None:
            allow &= mask
        s = np.where(allow, s, -np.inf)
        for j in range(Lq):
            row = s[j]
            terms = row[np.isfinite(row)]
            m = max(terms.max() if terms.size else -np.inf, sinks[h] if sinks is not None else -np.inf)
            if not np.isfinite(m):
                continue
            p = np.where(np.isfinite(row), np.exp(row - m), 0.0)
            den = p.sum() + (np.exp(sinks[h] - m) if sinks is not None else 0.0)
            o[j, h] = p @ v[:, h // g, :] / den
            lse[j, h] = m + np.log(den)
    return o, lse


def gather_pages(cache, indices, kv_len, layout="NHD"):
    """Logical [kv_len, Hkv, D] rows of one request from its page list."""
    if layout == "HND":
        cache = cache.transpose(0, 2, 1, 3)
    P = cache.shape[1]
    rows = [cache[indices[t // P], t % P] for t in range(kv_len)]
    return np.stack(rows) if rows else np.zeros((0,) + cache.shape[2:])


def make_csr(rng, kv_lens, page_size, num_pages=None):
    """Random distinct pages per request: (indptr, indices, last_page_len, num_pages)."""
    npg = [(n + page_size - 1) // page_size for n in kv_lens]
    total = sum(npg)
    num_pages = num_pages or total + 3
    perm = rng.permutation(num_pages)[:total].astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(npg)]).astype(np.int32)
    last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(kv_lens, npg)], np.int32)
    return indptr, perm, last, num_pages


LOG2E = float(1.0 / np.log(2.0))  # natural-log LSE -> base 2 (FlashInfer's, the wrappers' default)


def merge(v_a, s_a, v_b, s_b, base2=True):
    """Merges two attention states; LSE in base 2 (FlashInfer's convention) or natural log."""
    if base2:
        o, s = merge(v_a, np.asarray(s_a) / LOG2E, v_b, np.asarray(s_b) / LOG2E, base2=False)
        return o, s * LOG2E
    m = np.maximum(s_a, s_b)
    m = np.where(np.isfinite(m), m, 0.0)
    wa, wb = np.exp(s_a - m), np.exp(s_b - m)
    den = wa + wb
    with np.errstate(invalid="ignore", divide="ignore"):
        o = (wa[..., None] * v_a + wb[..., None] * v_b) / den[..., None]
        s = m + np.log(den)
    o = np.where(den[..., None] > 0, o, 0.0)
    return o, s


def linear(kind, q, k, v, g, beta, scale, state, l2norm=False):
    """One sequence: q,k [T,H,K], v [T,HV,V], g/beta [T,HV] (g may be [HV]), state [HV,K,V]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    S = np.array(state, np.float64)
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    rep = HV // H
    o = np.zeros((T, HV, V))
    for t in range(T):
        for h in range(HV):
            qt, kt = q[t, h // rep], k[t, h // rep]
            if l2norm:
                qt = qt / np.sqrt((qt * qt).sum() + 1e-6)
                kt = kt / np.sqrt((kt * kt).sum() + 1e-6)
            gt = g[h] if np.ndim(g) == 1 else g[t, h]
            S[h] *= np.exp(gt)
            if kind == "gdn":
                u = beta[t, h] * (v[t, h] - S[h].T @ kt)
            else:
                u = v[t, h]
            S[h] += np.outer(kt, u)
            o[t, h] = S[h].T @ (qt * scale)
    return o, S


def fp8_to_float(bits, kind="e4m3"):
    """uint8 fp8 bit patterns -> float64 (e4m3fn: bias 7, no inf; e5m2: bias 15)."""
    b = np.asarray(bits, np.uint8).astype(np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    if kind == "e4m3":
        e, m, bias, mb = (b >> 3) & 0xF, b & 7, 7, 3
    else:
        e, m, bias, mb = (b >> 2) & 0x1F, b & 3, 15, 2
    val = np.where(e == 0, m / 2.0 ** mb * 2.0 ** (1 - bias), (1 + m / 2.0 ** mb) * 2.0 ** (e - bias))
    return sign * val


def int8_quantize(x, f16_scale):
    """docs/kv_formats.md int8: scale = max |row| * fl(1/127) (f32, then f16), q = the integer
    nearest to row / scale (ties to even), saturated to [-127, 127]; a zero row: scale 0.
    Rows are the last axis: (q int8, scales float32 of x.shape[:-1])."""
    x = np.asarray(x, np.float32)
    s = np.abs(x).max(axis=-1) * np.float32(1.0 / 127.0)
    if f16_scale:
        s = s.astype(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.rint(x.astype(np.float64) / s[..., None].astype(np.float64))
    q = np.where(s[..., None] > 0, np.clip(q, -127, 127), 0).astype(np.int8)
    return q, s


def int8_quantize_latent(ckv, kpe, f16_scale):
    """docs/kv_formats.md "int8 MLA latent": each token's ckv and kpe parts quantised with
    their own scales (int8_quantize on each): (q_ckv, q_kpe, pairs [..., 2] = (ckv scale,
    kpe scale)) and the dequantised (ckv, kpe) in float64."""
    qc, sc = int8_quantize(ckv, f16_scale)
    qk, sk = int8_quantize(kpe, f16_scale)
    pairs = np.stack([sc, sk], axis=-1)
    deq = (qc.astype(np.float64) * sc.astype(np.float64)[..., None],
           qk.astype(np.float64) * sk.astype(np.float64)[..., None])
    return qc, qk, pairs, deq
