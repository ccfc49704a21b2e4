"""The buffers beside a paged KV cache, checked in one place for every wrapper (decode,
paged prefill, append, MLA): a quantised cache's scale caches and per-KV-head dequantisation
scales. Layouts and reasoning: docs/kv_formats.md. Not public API."""
import numpy as np

from ._clattn import Tensor
from ._util import _is_pyopencl_array, as_tensor, check, error, is_raw_buffer, scale_value

# Quantised cache dtypes -> (their name in messages, the dtypes their scale caches may hold).
# int8: one scale per (token, KV head); int4: a [scale, zero] pair per (token, KV head, group of
# quant_group head-dim elements); stored beside the pages with the same page ids.
QUANT_KV = {"i8": ("int8", ("f32", "f16")), "i4": ("int4", ("f32", "f16"))}
FLOAT_KV = ("f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2")
KV_DTYPES = FLOAT_KV + tuple(QUANT_KV)
# int4: head-dim elements per [scale, zero] pair when the caller names none (f16 pairs cost
# 12.5 % of the nibbles' bytes at 64; docs/kv_formats.md "int4: layout").
DEFAULT_QUANT_GROUP = 64
_PER_ROW = {"i8": "one scale per (token, KV head)", "i4": "a [scale, zero] pair per (token, KV head, group)"}


def is_quantised(kv_dtype):
    return kv_dtype in QUANT_KV


def quant_group_of(kv_dtype, quant_group, head_dim):
    """The group an int4 cache of ``head_dim`` uses (checked: 32, 64 or 128, dividing
    head_dim; None = DEFAULT_QUANT_GROUP); 0 for the other dtypes, which take none."""
    if kv_dtype != "i4":
        if quant_group is not None:
            raise error(f"quant_group={quant_group!r}: only int4 caches group their scales (the cache is {kv_dtype})")
        return 0
    g = DEFAULT_QUANT_GROUP if quant_group is None else quant_group
    if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g not in (32, 64, 128) or head_dim % g:
        raise error(f"quant_group={quant_group!r}: int4 takes 32, 64 or 128 head-dim elements per [scale, zero] "
                    f"pair, dividing head_dim {head_dim}")
    return int(g)


def cache_storage(kv_dtype, head_dim):
    """(tensor dtype, last dim) of a cache's tensors: int4 caches are uint8 bytes of two
    nibbles (element 2i in the low nibble of byte i), [..., head_dim / 2]."""
    return ("u8", head_dim // 2) if kv_dtype == "i4" else (kv_dtype, head_dim)


def scale_cache_shape(layout, num_pages, page_size, num_kv_heads, kv_dtype="i8", groups=0):
    """The shape of one scale cache: the cache's page/token/head order without head_dim;
    int4 adds [groups, 2] (a [scale, zero] pair per group of the row)."""
    if layout == "NHD":
        shape = (num_pages, page_size, num_kv_heads)
    else:
        shape = (num_pages, num_kv_heads, page_size)
    return shape + (groups, 2) if kv_dtype == "i4" else shape


def scale_caches(ctx, kv_dtype, k_scale_cache, v_scale_cache, layout, num_pages, page_size, num_kv_heads,
                 scale_dtype=None, track=None, groups=0):
    """The (k, v) scale-cache tensors of a cache of ``kv_dtype`` holding ``num_pages`` pages:
    (None, None) for a float cache (passing one is an error), both required and checked
    (dtype f32 or f16, the two alike; shape ``scale_cache_shape``, int4 with ``groups``
    pairs a row) for a quantised one. ``scale_dtype`` is the dtype a raw buffer is read as
    (default f32); ``track(x, name, make)`` (Writeback.track) when the op writes them. Checked
    before the op runs (a numpy array tracked for write-back is checked after its upload,
    before the op)."""
    if kv_dtype not in QUANT_KV:
        given = "k_scale_cache" if k_scale_cache is not None else "v_scale_cache" if v_scale_cache is not None else None
        if given:
            raise error(f"{given}: the cache is {kv_dtype}; scale caches belong to quantised caches "
                        f"({', '.join(n for n, _ in QUANT_KV.values())})")
        return None, None
    name, dtypes = QUANT_KV[kv_dtype]
    shape = scale_cache_shape(layout, num_pages, page_size, num_kv_heads, kv_dtype, groups)
    for arg, x in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
        if x is None:
            raise error(f"{arg}: required with an {name} cache ({_PER_ROW[kv_dtype]}, shape {list(shape)} "
                        f"{' or '.join(dtypes)}; docs/kv_formats.md)")

    def make(x, arg):
        if is_raw_buffer(x):
            return as_tensor(ctx, x, arg, scale_dtype or "f32", shape)
        return as_tensor(ctx, x, arg)

    def get(x, arg, want):
        t = track(x, arg, lambda: make(x, arg)) if track else make(x, arg)
        return check(t, arg, want, shape)

    kt = get(k_scale_cache, "k_scale_cache", dtypes)
    vt = get(v_scale_cache, "v_scale_cache", (kt.dtype,))
    return kt, vt


def _as_array(x):
    if isinstance(x, Tensor):
        return None  # stays on the device
    if _is_pyopencl_array(x):
        return x.get()
    return np.asarray(x)


def kv_scales(ctx, k_scale, v_scale, num_kv_heads, kv_dtype):
    """Dequantisation scales as the ops take them: (k_scale, v_scale, k_head_scales,
    v_head_scales). Each of k_scale / v_scale is None (1), a number, a one-element array, or
    ``num_kv_heads`` values (per-KV-head scales, vLLM's / FlashInfer's [Hkv] form: clattn
    Tensor, pyopencl Array or numpy). When either is per head both go as [Hkv] f32 tensors
    (the other's one value repeated). A quantised cache carries its own scales: only None
    or 1 there."""
    vals = []
    for arg, x in (("k_scale", k_scale), ("v_scale", v_scale)):
        if x is None or (isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool)):
            vals.append(1.0 if x is None else float(x))
            continue
        a = _as_array(x)
        if a is None:  # a device tensor: one value is read back, [Hkv] stays
            if int(np.prod(x.shape)) == 1:
                a = x.numpy()
            else:
                check(x, arg, ("f32",), (num_kv_heads,))
                vals.append(x)
                continue
        if a.dtype.kind not in "fiu":
            raise error(f"{arg}: expected numbers, got dtype {a.dtype}")
        if a.size == 1:
            vals.append(float(a.reshape(-1)[0]))
        elif a.size == num_kv_heads and a.ndim == 1:
            if not (a > 0).all():
                raise error(f"{arg}: per-KV-head scales must be > 0 (got {a.tolist()})")
            vals.append(as_tensor(ctx, np.ascontiguousarray(a, np.float32), arg, "f32"))
        else:
            raise error(f"{arg}: shape {list(a.shape)}: expected one value or [{num_kv_heads}] "
                        "(one per KV head)")
    if kv_dtype in QUANT_KV:
        for arg, x in zip(("k_scale", "v_scale"), vals):
            if not (isinstance(x, float) and x == 1.0):
                raise error(f"{arg}: an {QUANT_KV[kv_dtype][0]} cache carries {_PER_ROW[kv_dtype]} in its "
                            "scale caches; k_scale / v_scale must be None or 1")
        return 1.0, 1.0, None, None
    if all(isinstance(x, float) for x in vals):
        return vals[0], vals[1], None, None
    heads = [x if isinstance(x, Tensor) else ctx.to_device(np.full(num_kv_heads, x, np.float32), "f32") for x in vals]
    return 1.0, 1.0, heads[0], heads[1]


# MLA latent caches (docs/kv_formats.md "int8 MLA latent"): int8 latents carry one scale cache
# of a (ckv scale, kpe scale) pair per token, [num_pages, page_size, 2], beside the pages.
LATENT_SCALE_DTYPES = ("f32", "f16")


def latent_scale_cache_shape(num_pages, page_size):
    return (num_pages, page_size, 2)


def latent_scale_cache(ctx, kv_dtype, scale_cache, num_pages, page_size, scale_dtype=None):
    """The scale-cache tensor of an MLA latent cache of ``kv_dtype`` holding ``num_pages``
    pages: None for a float latent (passing one is an error), required and checked (f32 or
    f16, ``[num_pages, page_size, 2]``) for int8. ``scale_dtype`` is the dtype a raw buffer
    is read as (default f32)."""
    if kv_dtype != "i8":
        if scale_cache is not None:
            raise error(f"scale_cache: the latent cache is {kv_dtype}; a scale cache belongs to int8 latents")
        return None
    shape = latent_scale_cache_shape(num_pages, page_size)
    if scale_cache is None:
        raise error(f"scale_cache: required with an int8 latent cache (a (ckv scale, kpe scale) pair per token, "
                    f"shape {list(shape)} {' or '.join(LATENT_SCALE_DTYPES)}; docs/kv_formats.md)")
    if is_raw_buffer(scale_cache):
        t = as_tensor(ctx, scale_cache, "scale_cache", scale_dtype or "f32", shape)
    else:
        t = as_tensor(ctx, scale_cache, "scale_cache")
    return check(t, "scale_cache", LATENT_SCALE_DTYPES, shape)


def latent_kv_scale(kv_dtype, ckv_scale, kpe_scale, kv_scale):
    """The one dequantisation scale the MLA kernels take (``ckv_scale``, else clattn's
    ``kv_scale``; ``kpe_scale`` must be None or equal it). An int8 latent carries its scales
    in its scale cache: all three only None or 1 there."""
    if kv_dtype == "i8":
        for arg, x in (("ckv_scale", ckv_scale), ("kpe_scale", kpe_scale), ("kv_scale", kv_scale)):
            if x is not None and scale_value(x, arg) != 1.0:
                raise error(f"{arg}: an int8 latent cache carries a (ckv, kpe) scale pair per token in its "
                            "scale_cache; ckv_scale / kpe_scale / kv_scale must be None or 1")
        return 1.0
    scale = scale_value(ckv_scale if ckv_scale is not None else kv_scale, "ckv_scale")
    if kpe_scale is not None and scale_value(kpe_scale, "kpe_scale") != scale:
        raise error("kpe_scale != ckv_scale: clattn's MLA kernel takes one scale for both caches", "Unsupported")
    return scale
