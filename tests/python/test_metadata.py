import numpy as np
import pytest

import clattn


def _engine(P=4):
    # two requests in rows 1 and 0; slots page-aligned (request tokens fill pages in order)
    r2t = np.full((2, 12), -1, np.int32)
    r2t[1, :6] = np.r_[8:12, 20:22]     # pages 2, 5
    r2t[0, :9] = np.r_[0:4, 12:16, 4]   # pages 0, 3, 1
    return r2t, np.array([1, 0], np.int32), np.array([6, 9], np.int32)


def test_build_csr_page_table_slots():
    r2t, idx, seq = _engine()
    csr = clattn.build_csr(r2t, idx, seq, 4)
    np.testing.assert_array_equal(csr["kv_indptr"], [0, 2, 5])
    np.testing.assert_array_equal(csr["kv_indices"], [2, 5, 0, 3, 1])
    np.testing.assert_array_equal(csr["kv_last_page_len"], [2, 1])
    assert csr["qo_indptr"] is None
    clattn.validate(csr, num_pages=6, seq_lens=seq)
    pt = clattn.build_page_table(r2t, idx, seq, 4)
    assert pt["page_table"].shape == (2, 3)
    np.testing.assert_array_equal(pt["page_table"][0], [2, 5, -1])
    clattn.validate(pt, num_pages=6)
    back = clattn.page_table_to_csr(pt)
    np.testing.assert_array_equal(back["kv_indices"], csr["kv_indices"])
    np.testing.assert_array_equal(clattn.csr_to_page_table(csr)["page_table"], pt["page_table"])
    np.testing.assert_array_equal(clattn.build_slot_mapping(r2t, idx, seq), [21, 4])
    ext = clattn.build_slot_mapping(r2t, idx, seq, prefix_lens=[4, 8], extend_lens=[2, 1])
    np.testing.assert_array_equal(ext, [20, 21, 4])
    bt = clattn.build_block_table(r2t, idx, seq, 4)
    np.testing.assert_array_equal(bt, pt["page_table"])
    w = clattn.build_csr(r2t, idx, seq, 4, window_left=2)
    assert w["kv_start_offset"] is not None
    clattn.validate_engine_batch(r2t, idx, seq, 4, num_pages=6)
    clattn.validate_slot_mapping([0, -1, 23], num_pages=6, page_size=4)


def test_metadata_errors():
    r2t, idx, seq = _engine()
    csr = clattn.build_csr(r2t, idx, seq, 4)
    with pytest.raises(clattn.Error, match="kv_indices"):
        clattn.validate(csr, num_pages=5)
    bad = dict(csr, kv_last_page_len=np.array([2, 0], np.int32))
    with pytest.raises(clattn.Error, match=r"kv_last_page_len\[1\]"):
        clattn.validate(bad, num_pages=6)
    with pytest.raises(clattn.Error, match="slot"):
        clattn.validate_slot_mapping([24], num_pages=6, page_size=4)
    r2 = r2t.copy()
    r2[0, 5] = 17  # position 5 in another physical page than position 4 (same logical page)
    with pytest.raises(clattn.Error):
        clattn.validate_engine_batch(r2, idx, seq, 4)
    with pytest.raises(clattn.Error, match="req_to_token"):
        clattn.build_csr(r2t.reshape(-1), idx, seq, 4)
    with pytest.raises(clattn.Error, match="prefix_lens"):
        clattn.build_csr(r2t, idx, seq, 4, extend_lens=[1, 1])
    with pytest.raises(clattn.Error):
        clattn.validate({"foo": 1}, num_pages=1)
