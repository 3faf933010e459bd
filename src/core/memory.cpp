// memory.cpp — names of the memory categories of include/ds4/memory.h (used in logs, /metrics, errors).
#include "ds4/memory.h"

namespace ds4 {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::weights: return "weights";
    case MemCategory::raw_kv: return "raw_kv";
    case MemCategory::compressed_kv_r4: return "compressed_kv_r4";
    case MemCategory::compressed_kv_rhc: return "compressed_kv_rhc";
    case MemCategory::indexer_kv: return "indexer_kv";
    case MemCategory::compressor_state: return "compressor_state";
    case MemCategory::scratch: return "scratch";
    case MemCategory::other: return "other";
    case MemCategory::count: break;
  }
  return "unknown";
}

}  // namespace ds4
