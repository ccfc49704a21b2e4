"""Linear attention named like flash-linear-attention (FLA): Gated DeltaNet and simple gated
linear attention, functional form (initial_state / output_final_state / cu_seqlens) and the
pooled-state form engines use (state pool + state indices, updated in place).

Per v-head and token (state S ``[K, V]``, g a log decay):
  GDN: ``S = exp(g) S;  S = S + beta k (x) (v - S^T k);  o = S^T (q * scale)``
  GLA: ``S = exp(g) S + k (x) v;                         o = S^T (q * scale)``
"""
import numpy as np

from . import _clattn
from ._util import Writeback, as_tensor, check, context_of, error, host_i32, result

_IO = ("f32", "f16", "bf16")


def _prepare(q, k, v, g, beta, cu_seqlens, ctx, gdn, g_gamma=None, dtype=None, state=None):
    c = context_of(q, k, v, g, beta, state, ctx=ctx)
    q = check(as_tensor(c, q, "q", dtype), "q", _IO)
    k = check(as_tensor(c, k, "k", dtype or q.dtype), "k", (q.dtype,), q.shape)
    v = check(as_tensor(c, v, "v", dtype or q.dtype), "v", (q.dtype,))
    if len(q.shape) != 4:
        raise error(f"q: shape {list(q.shape)}, expected [B, T, H, K]")
    B, T, Hqk, Dk = q.shape
    if len(v.shape) != 4 or tuple(v.shape[:2]) != (B, T):
        raise error(f"v: shape {list(v.shape)}, expected [{B}, {T}, HV, V]")
    Hv, Dv = v.shape[2], v.shape[3]
    if cu_seqlens is not None:
        if B != 1:
            raise error(f"with cu_seqlens the batch dimension must be 1, got {B}")
        cu = host_i32(cu_seqlens, "cu_seqlens")
        if cu.size < 2 or cu[0] != 0 or cu[-1] != T or np.any(np.diff(cu) < 0):
            raise error(f"cu_seqlens must start at 0, be non-decreasing and end at T = {T}")
    else:
        cu = np.arange(0, B * T + 1, T, dtype=np.int32) if T > 0 else np.zeros(B + 1, np.int32)
    constant = False
    if g is not None:
        g = check(as_tensor(c, g, "g", "f32"), "g", ("f32",), (B, T, Hv)).view((B * T, Hv))
    elif g_gamma is not None:
        g = check(as_tensor(c, g_gamma, "g_gamma", "f32"), "g_gamma", ("f32",), (Hv,))
        constant = True
    else:
        g = c.zeros((Hv,), "f32")
        constant = True
    if gdn:
        if beta is None:
            raise error("beta is required for the gated delta rule")
        beta = check(as_tensor(c, beta, "beta", "f32"), "beta", ("f32",), (B, T, Hv)).view((B * T, Hv))
    dims = dict(B=B, T=T, Hqk=Hqk, Dk=Dk, Hv=Hv, Dv=Dv, N=len(cu) - 1)
    return c, q.view((B * T, Hqk, Dk)), k.view((B * T, Hqk, Dk)), v.view((B * T, Hv, Dv)), g, beta, cu, constant, dims


def _run(kind, c, q, k, v, g, beta, cu, constant, d, pool, indices, scale, l2norm, out, beta_is_logits=False,
         wb=None):
    """Runs the kernel; `wb` holds numpy destinations (the pool) tracked by the caller.
    Returns the output: a Tensor [B, T, HV, V], or the caller's numpy `out` written in place."""
    wb = wb or Writeback()
    idx = host_i32(indices, "state_indices")
    if idx.size != d["N"]:
        raise error(f"state_indices: {idx.size} entries for {d['N']} sequences")
    check(pool, "state pool", _IO, (None, d["Hv"], d["Dk"], d["Dv"]))
    lens = np.diff(cu)
    decode = d["N"] > 0 and bool(np.all(lens == 1))
    T = d["B"] * d["T"]
    if out is None:
        o = c.empty((T, d["Hv"], d["Dv"]), q.dtype)
    else:
        o = wb.track(out, "out", lambda: check(as_tensor(c, out, "out"), "out", (q.dtype,)))
        if o.nbytes != T * d["Hv"] * d["Dv"] * (4 if q.dtype == "f32" else 2):
            raise error(f"out: shape {list(o.shape)} does not hold [{d['B']}, {d['T']}, {d['Hv']}, {d['Dv']}]")
        o = o.view((T, d["Hv"], d["Dv"]))
    idx_dev = c.to_device(idx if idx.size else np.zeros(1, np.int32), "i32")
    cu_dev = None if decode else c.to_device(cu, "i32")
    _clattn._linear_run(c, kind, decode, d["Hqk"], d["Hv"], d["Dk"], d["Dv"], q.dtype,
                        0.0 if scale is None else float(scale), bool(l2norm), bool(beta_is_logits), constant,
                        q, k, v, g, beta, o, pool, idx, idx_dev, None if decode else cu, cu_dev)
    wb.done()
    return result(out, o.view((d["B"], d["T"], d["Hv"], d["Dv"])))


def _functional(kind, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, l2norm, ctx,
                g_gamma=None, out=None, dtype=None):
    c, q, k, v, g, beta, cu, constant, d = _prepare(q, k, v, g, beta, cu_seqlens, ctx, kind == "gdn",
                                                    g_gamma, dtype, initial_state)
    shape = (d["N"], d["Hv"], d["Dk"], d["Dv"])
    if initial_state is not None:
        s0 = check(as_tensor(c, initial_state, "initial_state", "f32"), "initial_state", ("f32",), shape)
        pool = s0.clone()
    else:
        pool = c.zeros(shape, "f32")
    o = _run(kind, c, q, k, v, g, beta, cu, constant, d, pool, np.arange(d["N"], dtype=np.int32), scale, l2norm,
             out)
    return o, (pool if output_final_state else None)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, head_first=False, use_qk_l2norm_in_kernel=False, *, out=None,
                           dtype=None, ctx=None):
    r"""Gated DeltaNet (chunked form), shaped like ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``.

    Args:
        q (Tensor-like): queries of shape ``[B, T, H, K]``.
        k (Tensor-like): keys of shape ``[B, T, H, K]``.
        v (Tensor-like): values of shape ``[B, T, HV, V]`` (``HV`` a multiple of ``H``:
            grouped value attention).
        g (Tensor-like): (forget) gating tensor (in log space!) of shape ``[B, T, HV]``, float32.
        beta (Tensor-like): betas of shape ``[B, T, HV]``, float32.
        scale (Optional[float]): scale of the attention scores; default ``1 / sqrt(K)``.
        initial_state (Optional[Tensor-like]): initial state of shape ``[N, HV, K, V]``
            float32 for ``N`` input sequences (not modified).
        output_final_state (Optional[bool]): whether to output the final state
            ``[N, HV, K, V]`` float32. Default: ``False``.
        cu_seqlens (Optional[array]): cumulative sequence lengths ``[N + 1]`` for
            variable-length training, consistent with the FlashAttention API (then B = 1).
        head_first (bool): must be False (``[B, T, H, ...]`` layout).
        use_qk_l2norm_in_kernel (bool): L2-normalise q and k in the kernel.
        out (Optional[Tensor]): output buffer ``[B, T, HV, V]``.
        dtype (Optional[str]): ``"bf16"`` when q/k/v are uint16 bit patterns.

    Returns:
        o (Tensor): outputs of shape ``[B, T, HV, V]`` in q's dtype.
        final_state (Tensor): final state ``[N, HV, K, V]`` float32 if
            ``output_final_state=True``, else ``None``.

    K and V must be 64, 128 or 256. q/k/v are f32, f16 or bf16 (one dtype); g and beta
    are float32 (numpy inputs are converted).
    """
    if head_first:
        raise error("head_first=True is not supported", "Unsupported")
    return _functional("gdn", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                       use_qk_l2norm_in_kernel, ctx, out=out, dtype=dtype)


def fused_recurrent_gated_delta_rule(q, k, v, g, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, cu_seqlens=None, use_qk_l2norm_in_kernel=False,
                                     *, out=None, dtype=None, ctx=None):
    r"""Gated DeltaNet (recurrent form), shaped like
    ``fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule``.

    Same arguments and results as :func:`chunk_gated_delta_rule` (``beta`` defaults to
    ones). Sequences of one token run the recurrent decode kernel, longer ones the
    chunked kernel (the same recurrence; results agree to rounding).
    """
    if beta is None:
        B, T, HV = (np.asarray(v.shape)[:3] if hasattr(v, "shape") else np.asarray(v).shape[:3])
        beta = np.ones((int(B), int(T), int(HV)), np.float32)
    return _functional("gdn", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                       use_qk_l2norm_in_kernel, ctx, out=out, dtype=dtype)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False,
                     cu_seqlens=None, *, out=None, dtype=None, ctx=None):
    r"""Simple gated linear attention (scalar decay per head), shaped like
    ``fla.ops.simple_gla.chunk_simple_gla``.

    Args:
        q (Tensor-like): ``[B, T, H, K]``.
        k (Tensor-like): ``[B, T, H, K]``.
        v (Tensor-like): ``[B, T, HV, V]``.
        g (Optional[Tensor-like]): forget gates (log space) ``[B, T, HV]`` float32.
        g_gamma (Optional[Tensor-like]): constant log decay per head ``[HV]`` float32
            (lightning attention); used when ``g`` is None. Neither = no decay.
        scale (Optional[float]): default ``1 / sqrt(K)``.
        initial_state (Optional[Tensor-like]): ``[N, HV, K, V]`` float32.
        output_final_state (bool): return the final state.
        cu_seqlens (Optional[array]): ``[N + 1]`` (then B = 1).

    Returns:
        o (Tensor) ``[B, T, HV, V]``, final_state (Tensor ``[N, HV, K, V]`` or None).
    """
    return _functional("gla", q, k, v, g, None, scale, initial_state, output_final_state, cu_seqlens, False,
                       ctx, g_gamma=g_gamma, out=out, dtype=dtype)


def fused_recurrent_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                               output_final_state=False, reverse=False, cu_seqlens=None, *, out=None, dtype=None,
                               ctx=None):
    r"""Simple GLA, recurrent form (``fla.ops.simple_gla.fused_recurrent_simple_gla``).
    Same arguments and results as :func:`chunk_simple_gla`; ``reverse=True`` is not
    supported."""
    if reverse:
        raise error("reverse=True is not supported", "Unsupported")
    return chunk_simple_gla(q, k, v, g, g_gamma, scale, initial_state, output_final_state, cu_seqlens,
                            out=out, dtype=dtype, ctx=ctx)


def fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, scale=None, initial_state_source=None,
                                            initial_state_indices=None, cu_seqlens=None,
                                            use_qk_l2norm_in_kernel=False, *, beta_is_logits=False, out=None,
                                            dtype=None, ctx=None):
    r"""Gated DeltaNet on a pooled state (SGLang's ``fused_recurrent_gated_delta_rule_update``
    form): the state of sequence ``i`` is ``initial_state_source[initial_state_indices[i]]``,
    read and written back in place.

    Args:
        q, k (Tensor-like): ``[B, T, H, K]`` (B = 1 with cu_seqlens).
        v (Tensor-like): ``[B, T, HV, V]``.
        g, beta (Tensor-like): ``[B, T, HV]`` float32.
        scale (Optional[float]): default ``1 / sqrt(K)``.
        initial_state_source (Tensor-like): the pool ``[num_slots, HV, K, V]`` (f32, f16
            or bf16 storage; arithmetic is f32). Updated in place (a numpy pool is copied
            to the device and written back after the call).
        initial_state_indices (array int32 ``[N]``): slot per sequence; ``-1`` = start
            from zero and discard the final state (padding). Slots must be distinct.
        cu_seqlens (Optional[array]): ``[N + 1]``; None = B sequences of T tokens.
        use_qk_l2norm_in_kernel (bool): L2-normalise q and k in the kernel.
        beta_is_logits (bool): apply a sigmoid to beta in the kernel.

    Returns:
        o (Tensor) ``[B, T, HV, V]``.

    All sequences of length one (decode) run the recurrent kernel, otherwise the chunked one.
    """
    c, q, k, v, g, beta, cu, constant, d = _prepare(q, k, v, g, beta, cu_seqlens, ctx, True, None, dtype,
                                                 initial_state_source)
    wb = Writeback()
    pool = wb.track(initial_state_source, "initial_state_source",
                    lambda: as_tensor(c, initial_state_source, "initial_state_source"))
    if initial_state_indices is None:
        raise error("initial_state_indices is required")
    return _run("gdn", c, q, k, v, g, beta, cu, constant, d, pool, initial_state_indices, scale,
                use_qk_l2norm_in_kernel, out, beta_is_logits, wb)


def fused_recurrent_simple_gla_update(q, k, v, g=None, g_gamma=None, scale=None, initial_state_source=None,
                                      initial_state_indices=None, cu_seqlens=None, *, out=None, dtype=None,
                                      ctx=None):
    r"""Simple GLA on a pooled state: like :func:`fused_recurrent_gated_delta_rule_update`
    (pool ``[num_slots, HV, K, V]`` updated in place, indices ``[N]``, ``-1`` = padding)
    with ``g`` ``[B, T, HV]`` or a constant ``g_gamma`` ``[HV]``.

    Returns:
        o (Tensor) ``[B, T, HV, V]``.
    """
    c, q, k, v, g, _, cu, constant, d = _prepare(q, k, v, g, None, cu_seqlens, ctx, False, g_gamma, dtype,
                                              initial_state_source)
    wb = Writeback()
    pool = wb.track(initial_state_source, "initial_state_source",
                    lambda: as_tensor(c, initial_state_source, "initial_state_source"))
    if initial_state_indices is None:
        raise error("initial_state_indices is required")
    return _run("gla", c, q, k, v, g, None, cu, constant, d, pool, initial_state_indices, scale, False, out,
                wb=wb)
