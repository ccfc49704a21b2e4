"""Paged-KV metadata: builders from SGLang-style engine tables (req_to_token,
req_pool_indices, seq_lens, prefix_lens, extend_lens) to FlashInfer CSR, FlashAttention/vLLM
page tables, slot mappings and block tables; conversions; validation. Host-side; results
are dicts / arrays of numpy int32. Rules: docs/metadata.md."""
from . import _clattn
from ._util import error


def build_csr(req_to_token, req_pool_indices, seq_lens, page_size, prefix_lens=None, extend_lens=None,
              window_left=-1):
    """FlashInfer paged-KV CSR from engine tables.

    Parameters
    ----------
    req_to_token : int array ``[pool_size, max_ctx]``
        Token -> slot table; slot ``s`` lives in page ``s // page_size`` at ``s % page_size``.
    req_pool_indices, seq_lens : int arrays ``[batch_size]``
        Row of each request and its KV length after this step.
    page_size : int
    prefix_lens, extend_lens : Optional int arrays ``[batch_size]``
        Extend batches (``prefix + extend == seq_len``); None = decode.
    window_left : int
        >= 0 keeps only the keys the first query row can see (fills kv_start_offset).

    Returns
    -------
    dict with ``kv_indptr``, ``kv_indices``, ``kv_last_page_len``, ``qo_indptr`` (extend
    only, else None), ``kv_start_offset`` (windowed only, else None), ``page_size``.
    """
    return _clattn._build_csr(req_to_token, req_pool_indices, seq_lens, int(page_size), prefix_lens, extend_lens,
                              int(window_left))


def build_page_table(req_to_token, req_pool_indices, seq_lens, page_size, prefix_lens=None, extend_lens=None,
                     max_pages=0):
    """FlashAttention / vLLM page table from engine tables.

    Returns a dict with ``page_table`` ``[batch_size, max_pages]`` (padded with -1),
    ``seq_lens``, ``cu_seqlens_q`` (extend only, else None), ``cu_seqlens_k``,
    ``max_pages`` and ``page_size``. ``max_pages = 0`` picks the tightest width.
    """
    return _clattn._build_page_table(req_to_token, req_pool_indices, seq_lens, int(page_size), prefix_lens,
                                     extend_lens, int(max_pages))


def build_slot_mapping(req_to_token, req_pool_indices, seq_lens, prefix_lens=None, extend_lens=None):
    """Slots the step's new tokens are written to: decode ``[batch_size]`` (position
    ``seq_len - 1``; -1 for an empty request), extend ``[sum(extend_lens)]`` request-major."""
    return _clattn._build_slot_mapping(req_to_token, req_pool_indices, seq_lens, prefix_lens, extend_lens)


def build_block_table(req_to_token, req_pool_indices, seq_lens, block_size, max_blocks=0):
    """Page ids at a fixed block size (e.g. MLA's 64): ``[batch_size, max_blocks]`` padded
    with -1. ``max_blocks = 0`` picks the tightest width."""
    return _clattn._build_block_table(req_to_token, req_pool_indices, seq_lens, int(block_size), int(max_blocks))


def csr_to_page_table(csr):
    """Converts a CSR dict (as :func:`build_csr` returns) to a page-table dict. A windowed
    CSR is rejected (a page table has no start offset)."""
    return _clattn._csr_to_page_table(int(csr["page_size"]), csr["kv_indptr"], csr["kv_indices"],
                                      csr["kv_last_page_len"], csr.get("qo_indptr"), csr.get("kv_start_offset"))


def page_table_to_csr(table):
    """Converts a page-table dict (as :func:`build_page_table` returns) to a CSR dict."""
    return _clattn._page_table_to_csr(int(table["page_size"]), table["page_table"], table["seq_lens"],
                                      table.get("cu_seqlens_q"), table.get("cu_seqlens_k"))


def validate(metadata, num_pages, seq_lens=None):
    """Validates a CSR dict (keys ``kv_indptr``, ``kv_indices``, ``kv_last_page_len``,
    ``page_size``, optional ``qo_indptr``, ``kv_start_offset``) or a page-table dict (keys
    ``page_table``, ``seq_lens``, ``page_size``, optional ``cu_seqlens_q/k``) against a cache
    of ``num_pages`` pages. With ``seq_lens`` a CSR's lengths are checked against them.

    Raises clattn.Error (status 'invalid argument') naming the field, request and value,
    e.g. ``kv_last_page_len[3] = 0: ...``.
    """
    if not isinstance(metadata, dict):
        raise error("validate: expected a CSR or page-table dict")
    if "kv_indptr" in metadata:
        return _clattn._validate_csr(int(metadata["page_size"]), int(num_pages), metadata["kv_indptr"],
                                     metadata["kv_indices"], metadata["kv_last_page_len"], metadata.get("qo_indptr"),
                                     metadata.get("kv_start_offset"), seq_lens)
    if "page_table" in metadata:
        return _clattn._validate_page_table(int(metadata["page_size"]), int(num_pages), metadata["page_table"],
                                            metadata["seq_lens"], metadata.get("cu_seqlens_q"),
                                            metadata.get("cu_seqlens_k"))
    raise error("validate: the dict has neither 'kv_indptr' (CSR) nor 'page_table'")


def validate_engine_batch(req_to_token, req_pool_indices, seq_lens, page_size, prefix_lens=None, extend_lens=None,
                          num_pages=0):
    """Checks engine tables token by token (pool indices, lengths, slots >= 0, position t
    at offset ``t % page_size`` of its page, one physical page per logical page; with
    ``num_pages > 0`` slots below ``num_pages * page_size``)."""
    return _clattn._validate_engine_batch(req_to_token, req_pool_indices, seq_lens, int(page_size), prefix_lens,
                                          extend_lens, int(num_pages))


def validate_slot_mapping(slot_mapping, num_pages, page_size):
    """Negative slots are padding; others must be below ``num_pages * page_size``."""
    return _clattn._validate_slot_mapping(slot_mapping, int(num_pages), int(page_size))
