"""rope_append_paged_kv_cache into int8 and int4 caches: the fused kernel stores exactly what
the two-kernel path stores (apply_rope_pos_ids / apply_rope_with_cos_sin_cache, then
append_kv / append_paged_kv_cache of the rotated rows): bytes, nibbles and scale caches bit for
bit; q_out is the two-kernel path's q. Bad arguments are refused naming the argument, before
anything is written."""
import numpy as np
import pytest

import clattn
import ref

Hq, Hkv, D, P = 4, 2, 128, 16


def zero_caches(ctx, kv, layout, num_pages, scale_dtype, group):
    """(k_cache, v_cache, k_scale_cache, v_scale_cache), zeroed: int8 caches, or int4 uint8
    nibble pairs with a [scale, zero] pair per group."""
    width, dt = (D // 2, "u8") if kv == "int4" else (D, "i8")
    lead = (num_pages, P, Hkv) if layout == "NHD" else (num_pages, Hkv, P)
    scales = lead + ((D // group, 2) if kv == "int4" else ())
    return (ctx.zeros(lead + (width,), dt), ctx.zeros(lead + (width,), dt), ctx.zeros(scales, scale_dtype),
            ctx.zeros(scales, scale_dtype))


def rows(rng, n, h, src):
    """[n, h, D] rows of a wide range (as the kernel reads them: f32, or bf16 bit patterns)."""
    x = (rng.standard_normal((n, h, D)) * rng.uniform(0.1, 4, (n, h, 1))).astype(np.float32)
    return clattn.float_to_bf16(x) if src == "bf16" else x


def as_f32(x, src):
    return clattn.bf16_to_float(x) if src == "bf16" else x


# kv, layout, scale dtype, group, interleave, rotary_dim, cos/sin cache, metadata form, source dtype
CASES = [
    ("int8", "NHD", "f32", None, False, None, False, "slots", "f32"),
    ("int8", "HND", "f16", None, True, 48, False, "flashinfer", "bf16"),
    ("int8", "NHD", "f16", None, False, None, True, "flashinfer", "f32"),
    ("int4", "NHD", "f16", 32, False, 48, False, "slots", "f32"),  # NeoX pairs straddle the groups
    ("int4", "HND", "f32", 64, True, None, True, "flashinfer", "bf16"),
    ("int4", "NHD", "f32", 128, False, None, False, "flashinfer", "f32"),
    ("int4", "HND", "f16", 32, False, None, False, "slots", "bf16"),  # groups inside each NeoX half
]


@pytest.mark.parametrize("kv,layout,scale_dtype,group,interleave,rotary_dim,use_cache,meta,src", CASES)
def test_rope_append_quantised_equals_rope_then_append(ctx, rng, kv, layout, scale_dtype, group, interleave,
                                                        rotary_dim, use_cache, meta, src):
    seq_lens = np.array([7, 30], np.int32)
    append_lens = np.array([3, 30], np.int32)
    indptr, indices, last, num_pages = ref.make_csr(rng, list(seq_lens), P)
    append_indptr = np.concatenate([[0], np.cumsum(append_lens)]).astype(np.int32)
    nnz = int(append_indptr[-1])
    bi, positions = clattn.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    slots = indices[indptr[bi] + positions // P].astype(np.int64) * P + positions % P
    if meta == "slots":
        slots[1] = -1  # padding: q rotated, nothing stored
    q, k, v = rows(rng, nnz, Hq, src), rows(rng, nnz, Hkv, src), rows(rng, nnz, Hkv, src)
    k[0, 0] = 0  # an all-zero rotated row: scale 0
    R = rotary_dim or D
    cos_sin = None
    if use_cache:
        ang = np.arange(64)[:, None] * 10000.0 ** (-2.0 * np.arange(R // 2) / R) * 0.25
        cos_sin = np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    quant = dict(kv_data_type="int4", quant_group=group) if kv == "int4" else {}

    # The fused call.
    kc, vc, ksc, vsc = zero_caches(ctx, kv, layout, num_pages, scale_dtype, group or 64)
    where = (dict(batch_indices=bi, kv_indices=indices, kv_indptr=indptr, kv_last_page_len=last) if meta == "flashinfer"
             else dict(slot_mapping=slots))
    q_out = clattn.rope_append_paged_kv_cache(
        q, k, v, positions, (kc, vc), kv_layout=layout, rotary_dim=rotary_dim, interleave=interleave,
        cos_sin_cache=cos_sin, k_scale_cache=ksc, v_scale_cache=vsc, q_out_dtype="f32",
        dtype="bf16" if src == "bf16" else None, **where, **quant)

    # RoPE, then append, on the f32 rows the kernel reads.
    qf, kf, vf = as_f32(q, src), as_f32(k, src), as_f32(v, src)
    if use_cache:
        q_rot, k_rot = clattn.apply_rope_with_cos_sin_cache(positions, qf, kf, D, cos_sin, is_neox=not interleave)
    else:
        q_rot, k_rot = clattn.apply_rope_pos_ids(qf, kf, positions, rotary_dim=rotary_dim, interleave=interleave)
    kc2, vc2, ksc2, vsc2 = zero_caches(ctx, kv, layout, num_pages, scale_dtype, group or 64)
    if meta == "flashinfer":
        clattn.append_paged_kv_cache(k_rot, vf, bi, positions, (kc2, vc2), indices, indptr, last, layout,
                                     k_scale_cache=ksc2, v_scale_cache=vsc2, **quant)
    else:
        clattn.append_kv(k_rot, vf, slots, kc2, vc2, layout, k_scale_cache=ksc2, v_scale_cache=vsc2, **quant)

    np.testing.assert_array_equal(q_out.numpy(), q_rot.numpy())
    for name, got, want in (("k_cache", kc, kc2), ("v_cache", vc, vc2), ("k_scale_cache", ksc, ksc2),
                            ("v_scale_cache", vsc, vsc2)):
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)
    # Something was stored: the second request's rows carry non-zero scales.
    stored = np.moveaxis(ksc.numpy(), 1, 2) if layout == "HND" else ksc.numpy()
    assert (stored.reshape((-1,) + stored.shape[2:])[slots[3:]] != 0).any()


def test_rope_append_int4_numpy_destinations(ctx, rng):
    """numpy uint8 caches of page size 1 (3-D) and [slots, heads, groups, 2] scale caches are
    written back in place (the default group, 64), as append_kv writes them."""
    n, T = 6, 3
    q, k, v = rows(rng, T, Hq, "f32"), rows(rng, T, Hkv, "f32"), rows(rng, T, Hkv, "f32")
    pos = np.array([3, 0, 11])
    slots = np.array([4, -1, 1], np.int64)
    kc, vc = np.zeros((n, Hkv, D // 2), np.uint8), np.zeros((n, Hkv, D // 2), np.uint8)
    ksc, vsc = np.zeros((n, Hkv, D // 64, 2), np.float32), np.zeros((n, Hkv, D // 64, 2), np.float32)
    q_out = clattn.rope_append_paged_kv_cache(q, k, v, pos, (kc, vc), slots, k_scale_cache=ksc, v_scale_cache=vsc,
                                              kv_data_type="int4", ctx=ctx)
    q_rot, k_rot = clattn.apply_rope_pos_ids(q, k, pos, ctx=ctx)
    kc2, vc2, ksc2, vsc2 = np.zeros_like(kc), np.zeros_like(vc), np.zeros_like(ksc), np.zeros_like(vsc)
    clattn.append_kv(k_rot, v, slots, kc2, vc2, k_scale_cache=ksc2, v_scale_cache=vsc2, kv_data_type="int4", ctx=ctx)
    np.testing.assert_array_equal(q_out.numpy(), q_rot.numpy())
    for got, want in ((kc, kc2), (vc, vc2), (ksc, ksc2), (vsc, vsc2)):
        np.testing.assert_array_equal(got, want)
    assert ksc[[4, 1]].all() and not ksc[[0, 2, 3, 5]].any()
    one_group = np.zeros((n, Hkv, 1, 2), np.float32)  # D / 64 pairs are due
    with pytest.raises(clattn.Error, match="k_scale_cache: shape"):
        clattn.rope_append_paged_kv_cache(q, k, v, pos, (kc, vc), slots, k_scale_cache=one_group, v_scale_cache=vsc,
                                          kv_data_type="int4", ctx=ctx)


def test_rope_append_quantised_errors(ctx, rng):
    n = 4
    k = rows(rng, 2, Hkv, "f32")
    pos, slots = np.arange(2), np.array([0, 1], np.int64)
    i8 = zero_caches(ctx, "int8", "NHD", n, "f32", 64)
    i4 = zero_caches(ctx, "int4", "NHD", n, "f32", 32)

    def call(caches, **kw):
        clattn.rope_append_paged_kv_cache(None, k, k, pos, caches[:2], slots, **kw)

    def refused(match, caches, status=1, **kw):
        with pytest.raises(clattn.Error, match=match) as ei:
            call(caches, **kw)
        assert ei.value.status_code == status, ei.value

    refused("k_scale_cache: required with an int8 cache", i8)
    refused("v_scale_cache: required with an int8 cache", i8, k_scale_cache=i8[2])
    refused(r"v_scale_cache: shape", i8, k_scale_cache=i8[2], v_scale_cache=ctx.zeros((n, P, 3), "f32"))
    refused("k_scale_cache: dtype", i8, k_scale_cache=ctx.zeros((n, P, Hkv), "bf16"), v_scale_cache=i8[3])
    refused("v_scale_cache: dtype", i8, k_scale_cache=i8[2], v_scale_cache=ctx.zeros((n, P, Hkv), "f16"))
    refused("k_scale: an int8 cache", i8, k_scale=0.5, k_scale_cache=i8[2], v_scale_cache=i8[3])
    refused("quant_group=32: only int4", i8, k_scale_cache=i8[2], v_scale_cache=i8[3], quant_group=32)
    refused("k_scale_cache: required with an int4 cache", i4, kv_data_type="int4", quant_group=32)
    for g in (48, 16, 0):
        refused(f"quant_group={g}: int4 takes 32, 64 or 128", i4, k_scale_cache=i4[2], v_scale_cache=i4[3],
                kv_data_type="int4", quant_group=g)
    refused("k_scale_cache: shape", i4, k_scale_cache=i4[2], v_scale_cache=i4[3], kv_data_type="int4")  # group 64
    refused("kv_data_type='int4'", i4, k_scale_cache=i4[2], v_scale_cache=i4[3])  # a uint8 cache, no dtype
    refused("k_cache: dtype i8; an int4 cache is uint8", i8, k_scale_cache=i4[2], v_scale_cache=i4[3],
            kv_data_type="int4", quant_group=32)
    f32 = (ctx.zeros((n, P, Hkv, D), "f32"), ctx.zeros((n, P, Hkv, D), "f32"))
    refused("k_scale_cache: the cache is f32", f32, k_scale_cache=i8[2], v_scale_cache=i8[3])
    refused("v_scale: an int8 cache", i8, v_scale=np.array([0.5, 2.0], np.float32), k_scale_cache=i8[2],
            v_scale_cache=i8[3])  # per-KV-head scales: float and fp8 caches only
    refused("k_scale: an int4 cache", i4, k_scale=np.array([0.5, 2.0], np.float32), k_scale_cache=i4[2],
            v_scale_cache=i4[3], kv_data_type="int4", quant_group=32)
    for t in i8 + i4 + f32:
        assert not t.numpy().any(), "a rejected call wrote"
