// The backend implementations behind create_backend (registry.cpp).
#pragma once
#include <memory>

#include "clattn/backend.hpp"

namespace clattn::engine {

// MHA/GQA/MQA layers on the paged cache: CSR metadata, or a page table with page_table.
std::unique_ptr<AttentionBackend> make_paged(const Context& ctx, const KVPool& pool, const BackendConfig& cfg,
                                             bool page_table);
std::unique_ptr<AttentionBackend> make_mla(const Context& ctx, const KVPool& pool, const BackendConfig& cfg);
std::unique_ptr<AttentionBackend> make_linear(const Context& ctx, const KVPool& pool, const BackendConfig& cfg);
// HSA in the decode steps of cfg.hsa's layers, the paged backend (CSR) for the rest.
std::unique_ptr<AttentionBackend> make_hsa(const Context& ctx, const KVPool& pool, const BackendConfig& cfg);
std::unique_ptr<AttentionBackend> make_hybrid(const Context& ctx, const KVPool& pool, const BackendConfig& cfg);

// Checks that `pool` holds layer `l` with the same kind and buffers set.
void check_pool_layer(const KVPool& pool, const LayerSpec& l, const std::string& backend);
// Rethrows a failure while preparing a layer with the backend and layer named.
[[noreturn]] void rethrow_for_layer(const Error& e, const std::string& tag, const Context& ctx);

}  // namespace clattn::engine
