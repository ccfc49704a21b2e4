"""clattn: LLM attention kernels for any OpenCL device, with a FlashInfer-shaped API.

Quick start::

    import numpy as np, clattn
    ctx = clattn.Context()                      # or Context("nvidia"), Context(0),
                                                # Context((pyopencl_ctx, pyopencl_queue))
    w = clattn.BatchDecodeWithPagedKVCacheWrapper(ctx, "NHD")
    w.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads,
           head_dim, page_size, q_data_type="float16")
    o = w.run(q, (k_cache, v_cache))            # clattn.Tensor; o.numpy() copies back

Buffers: ops take clattn Tensors (``ctx.to_device``), pyopencl Arrays/Buffers and raw
cl_mem ints zero-copy, DLPack tensors with device type kDLOpenCL (4), or numpy arrays
(copied). numpy has no bfloat16: bf16 data is uint16 bit patterns with an explicit
``dtype="bf16"`` (:func:`float_to_bf16`, :func:`bf16_to_float`); fp8 is uint8 with
``dtype="fp8_e4m3"`` / ``"fp8_e5m2"``. Errors raise :class:`clattn.Error`. See
docs/python.md for the decisions and the differences from FlashInfer / FLA.
"""
from ._clattn import Capture, command_buffer_version
from ._clattn import Context, Tensor, Error, DecodePlan, ExtendPlan, MlaPlan, HsaPlan, DsaIndexPlan, devices, version
from ._util import (default_context, set_default_context, from_dlpack, float_to_bf16, bf16_to_float)
from .attention import (BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper,
                        BatchPrefillWithRaggedKVCacheWrapper, merge_state, merge_state_in_place, merge_states,
                        append_kv, append_paged_kv_cache, get_batch_indices_positions)
from .mla import BatchMLAPagedAttentionWrapper
from .sparse import HsaDecodeWrapper
from .dsa import DsaIndexer, MlaSparseDecodeWrapper
from .rope import (apply_rope_pos_ids, apply_rope_pos_ids_inplace, apply_rope_with_cos_sin_cache,
                   apply_rope_with_cos_sin_cache_inplace, rope_append_paged_kv_cache)
from .linear import (chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, chunk_simple_gla,
                     fused_recurrent_simple_gla, fused_recurrent_gated_delta_rule_update,
                     fused_recurrent_simple_gla_update)
from .metadata import (build_csr, build_page_table, build_slot_mapping, build_block_table, csr_to_page_table,
                       page_table_to_csr, validate, validate_engine_batch, validate_slot_mapping)

__version__ = version()

__all__ = [
    "Context", "Tensor", "Error", "DecodePlan", "ExtendPlan", "MlaPlan", "HsaPlan", "DsaIndexPlan", "devices",
    "version",
    "default_context", "set_default_context", "from_dlpack", "float_to_bf16", "bf16_to_float",
    "BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper", "merge_state", "merge_state_in_place", "merge_states",
    "append_kv", "append_paged_kv_cache", "get_batch_indices_positions", "BatchMLAPagedAttentionWrapper",
    "HsaDecodeWrapper", "DsaIndexer", "MlaSparseDecodeWrapper",
    "apply_rope_pos_ids", "apply_rope_pos_ids_inplace", "apply_rope_with_cos_sin_cache",
    "apply_rope_with_cos_sin_cache_inplace", "rope_append_paged_kv_cache",
    "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "chunk_simple_gla",
    "fused_recurrent_simple_gla", "fused_recurrent_gated_delta_rule_update", "fused_recurrent_simple_gla_update",
    "build_csr", "build_page_table", "build_slot_mapping", "build_block_table", "csr_to_page_table",
    "page_table_to_csr", "validate", "validate_engine_batch", "validate_slot_mapping",
]
