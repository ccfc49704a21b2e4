// Native metadata builders, conversions and validation (host). Inputs are integer arrays
// (copied to int32), outputs dicts of int32 numpy arrays named like the C++ fields.
#include <cstring>

#include "binding.hpp"

namespace clattn_py {

namespace {

py::array_t<int32_t> np32(const std::vector<int32_t>& v) {
  py::array_t<int32_t> a(py::ssize_t(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(int32_t));
  return a;
}

// Host copies behind an EngineBatch (kept alive while the builder runs).
struct EngineArrays {
  std::vector<int32_t> r2t, pool_idx, seq, prefix, extend;
  clattn::EngineBatch b;
  EngineArrays(const py::object& req_to_token, const py::object& req_pool_indices, const py::object& seq_lens,
               const py::object& prefix_lens, const py::object& extend_lens) {
    py::array a = py::array::ensure(req_to_token);
    if (!a || a.ndim() != 2) invalid("req_to_token: expected a 2-D integer array [pool_size, max_ctx]");
    r2t = to_i32(a, "req_to_token");
    b.pool_size = int(a.shape(0));
    b.max_ctx = int(a.shape(1));
    b.req_to_token = r2t.data();
    pool_idx = to_i32(req_pool_indices, "req_pool_indices");
    seq = to_i32(seq_lens, "seq_lens");
    if (pool_idx.size() != seq.size())
      invalid("req_pool_indices has " + std::to_string(pool_idx.size()) + " entries, seq_lens " + std::to_string(seq.size()));
    b.req_pool_indices = pool_idx.data();
    b.seq_lens = seq.data();
    b.batch_size = int(seq.size());
    if (!extend_lens.is_none()) {
      extend = to_i32(extend_lens, "extend_lens");
      if (prefix_lens.is_none()) invalid("prefix_lens is required with extend_lens");
      prefix = to_i32(prefix_lens, "prefix_lens");
      if (extend.size() != seq.size() || prefix.size() != seq.size())
        invalid("prefix_lens / extend_lens must have batch_size = " + std::to_string(seq.size()) + " entries");
      b.prefix_lens = prefix.data();
      b.extend_lens = extend.data();
    } else if (!prefix_lens.is_none()) {
      invalid("prefix_lens given without extend_lens");
    }
  }
};

py::dict csr_dict(const clattn::PagedCsr& c) {
  py::dict d;
  d["page_size"] = c.page_size;
  d["kv_indptr"] = np32(c.kv_indptr);
  d["kv_indices"] = np32(c.kv_indices);
  d["kv_last_page_len"] = np32(c.kv_last_page_len);
  d["qo_indptr"] = c.qo_indptr.empty() ? py::object(py::none()) : py::object(np32(c.qo_indptr));
  d["kv_start_offset"] = c.kv_start_offset.empty() ? py::object(py::none()) : py::object(np32(c.kv_start_offset));
  return d;
}

py::dict table_dict(const clattn::PageTable& t) {
  py::dict d;
  d["page_size"] = t.page_size;
  d["max_pages"] = t.max_pages;
  auto pt = np32(t.page_table);
  d["page_table"] = pt.reshape({py::ssize_t(t.seq_lens.size()), py::ssize_t(t.max_pages)});
  d["seq_lens"] = np32(t.seq_lens);
  d["cu_seqlens_q"] = t.cu_seqlens_q.empty() ? py::object(py::none()) : py::object(np32(t.cu_seqlens_q));
  d["cu_seqlens_k"] = np32(t.cu_seqlens_k);
  return d;
}

clattn::PagedCsr csr_from(int page_size, py::object kv_indptr, py::object kv_indices, py::object last,
                          py::object qo_indptr, py::object kv_start_offset) {
  clattn::PagedCsr c;
  c.page_size = page_size;
  c.kv_indptr = to_i32(kv_indptr, "kv_indptr");
  c.kv_indices = to_i32(kv_indices, "kv_indices");
  c.kv_last_page_len = to_i32(last, "kv_last_page_len");
  if (!qo_indptr.is_none()) c.qo_indptr = to_i32(qo_indptr, "qo_indptr");
  if (!kv_start_offset.is_none()) c.kv_start_offset = to_i32(kv_start_offset, "kv_start_offset");
  return c;
}

clattn::PageTable table_from(int page_size, py::object page_table, py::object seq_lens, py::object cu_q, py::object cu_k) {
  clattn::PageTable t;
  t.page_size = page_size;
  py::array a = py::array::ensure(page_table);
  if (!a || a.ndim() != 2) invalid("page_table: expected a 2-D integer array [batch_size, max_pages]");
  t.max_pages = int(a.shape(1));
  t.page_table = to_i32(a, "page_table");
  t.seq_lens = to_i32(seq_lens, "seq_lens");
  if (size_t(a.shape(0)) != t.seq_lens.size())
    invalid("page_table has " + std::to_string(a.shape(0)) + " rows, seq_lens " + std::to_string(t.seq_lens.size()) + " entries");
  if (!cu_q.is_none()) t.cu_seqlens_q = to_i32(cu_q, "cu_seqlens_q");
  if (!cu_k.is_none()) t.cu_seqlens_k = to_i32(cu_k, "cu_seqlens_k");
  return t;
}

}  // namespace

void init_metadata(py::module_& m) {
  m.def("_build_csr", [](py::object r2t, py::object idx, py::object seq, int page_size, py::object prefix,
                         py::object extend, int window_left) {
    EngineArrays e(r2t, idx, seq, prefix, extend);
    return csr_dict(clattn::build_csr(e.b, page_size, window_left));
  });
  m.def("_build_page_table", [](py::object r2t, py::object idx, py::object seq, int page_size, py::object prefix,
                                py::object extend, int max_pages) {
    EngineArrays e(r2t, idx, seq, prefix, extend);
    return table_dict(clattn::build_page_table(e.b, page_size, max_pages));
  });
  m.def("_build_slot_mapping", [](py::object r2t, py::object idx, py::object seq, py::object prefix, py::object extend) {
    EngineArrays e(r2t, idx, seq, prefix, extend);
    return np32(clattn::build_slot_mapping(e.b));
  });
  m.def("_build_block_table", [](py::object r2t, py::object idx, py::object seq, int block_size, int max_blocks) {
    EngineArrays e(r2t, idx, seq, py::none(), py::none());
    int width = 0;
    auto v = clattn::build_block_table(e.b, block_size, &width, max_blocks);
    return np32(v).reshape({py::ssize_t(e.b.batch_size), py::ssize_t(width)});
  });
  m.def("_csr_to_page_table", [](int page_size, py::object indptr, py::object indices, py::object last,
                                 py::object qo, py::object start) {
    return table_dict(clattn::csr_to_page_table(csr_from(page_size, indptr, indices, last, qo, start)));
  });
  m.def("_page_table_to_csr", [](int page_size, py::object pt, py::object seq, py::object cu_q, py::object cu_k) {
    return csr_dict(clattn::page_table_to_csr(table_from(page_size, pt, seq, cu_q, cu_k)));
  });
  m.def("_validate_csr", [](int page_size, int num_pages, py::object indptr, py::object indices, py::object last,
                            py::object qo, py::object start, py::object seq_lens) {
    auto c = csr_from(page_size, indptr, indices, last, qo, start);
    std::vector<int32_t> seq;
    if (!seq_lens.is_none()) {
      seq = to_i32(seq_lens, "seq_lens");
      if (seq.size() != c.kv_last_page_len.size()) invalid("seq_lens: expected batch_size entries");
    }
    clattn::validate(c, clattn::CacheShape{num_pages, page_size}, seq.empty() ? nullptr : seq.data());
  });
  m.def("_validate_page_table", [](int page_size, int num_pages, py::object pt, py::object seq, py::object cu_q,
                                   py::object cu_k) {
    clattn::validate(table_from(page_size, pt, seq, cu_q, cu_k), clattn::CacheShape{num_pages, page_size});
  });
  m.def("_validate_engine_batch", [](py::object r2t, py::object idx, py::object seq, int page_size, py::object prefix,
                                     py::object extend, int num_pages) {
    EngineArrays e(r2t, idx, seq, prefix, extend);
    if (num_pages > 0) clattn::validate(e.b, clattn::CacheShape{num_pages, page_size});
    else clattn::validate(e.b, page_size);
  });
  m.def("_validate_slot_mapping", [](py::object slots, int num_pages, int page_size) {
    auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(slots);
    if (!a) invalid("slot_mapping: expected an integer array");
    clattn::validate_slot_mapping(a.data(), int64_t(a.size()), clattn::CacheShape{num_pages, page_size});
  });
}

}  // namespace clattn_py
