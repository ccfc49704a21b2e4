// The paged-cache ops in one include, kept so existing `#include <clattn/ops.hpp>` lines
// keep working: the cache descriptor (paged_kv.hpp), KV append (append_kv.hpp), the merge
// of attention states (merge_state.hpp) and paged decode (decode.hpp). Enqueue and
// PlanBuffer live in context.hpp.
#pragma once
#include "clattn/append_kv.hpp"
#include "clattn/context.hpp"
#include "clattn/decode.hpp"
#include "clattn/merge_state.hpp"
#include "clattn/paged_kv.hpp"
