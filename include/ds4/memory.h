// memory.h — memory accounting by category (plain values; shared by engine, server, planner).
//
// Counted where memory is allocated (never estimated afterwards). See docs/MEMORY.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ds4 {

enum class MemCategory : int {
  weights = 0,        // model tensors (file-mapped on CPU; device copies on GPU)
  raw_kv,             // sliding-window raw KV rows
  compressed_kv_r4,   // ratio-4 (CSA) compressed attention rows
  compressed_kv_rhc,  // heavily compressed (ratio-128/HCA) rows
  indexer_kv,         // lightning-indexer rows (ratio-4 layers)
  compressor_state,   // compressor frontier (kv + score of the current/previous block)
  scratch,            // activations and temporaries of the forward pass
  other,              // tokenizer tables, server buffers, ...
  count
};
constexpr int kMemCategoryCount = static_cast<int>(MemCategory::count);
const char* mem_category_name(MemCategory c);  // "weights", "raw_kv", ...

struct MemBytes {
  std::array<uint64_t, kMemCategoryCount> bytes{};
  uint64_t& operator[](MemCategory c) { return bytes[static_cast<int>(c)]; }
  uint64_t operator[](MemCategory c) const { return bytes[static_cast<int>(c)]; }
  uint64_t total() const {
    uint64_t t = 0;
    for (auto b : bytes) t += b;
    return t;
  }
};

struct SessionMemory {
  uint64_t session_id = 0;
  int64_t tokens = 0;
  MemBytes host;    // bytes in host memory
  MemBytes device;  // bytes in device memory (0 on CPU)
};

// Growth of one session's KV per token, by category (rows per token × row bytes; MODEL.md §10.3).
using MemRate = std::array<double, kMemCategoryCount>;

// The whole process, counted by category where memory is allocated, and reconciled against what the OS
// and the driver report. host.weights is the file-mapped GGUF (address space; host_weights_resident says
// how much of it is in RAM now) plus the small tensors decoded to float; on CUDA device.weights are the
// device copies. host.other holds the tokenizer and the sessions' token ids and logits.
struct MemoryReport {
  MemBytes host;
  MemBytes device;
  std::vector<SessionMemory> sessions;
  uint64_t host_rss = 0;               // from /proc/self/status (VmRSS)
  uint64_t host_mapped_weights = 0;    // file-mapped weight bytes (resident or not)
  uint64_t host_weights_resident = 0;  // of those, pages in RAM now (mincore)
  // host_rss − (host.total() − host_mapped_weights + host_weights_resident): allocator slack, the C++
  // runtime, thread stacks, libraries, HTTP buffers. Negative when committed KV blocks are not touched yet.
  int64_t host_unexplained = 0;
  uint64_t device_total = 0, device_free = 0;  // cudaMemGetInfo, 0 on CPU
  // (device_total − device_free) − device.total(): the CUDA context, the runtime's pools, other processes.
  int64_t device_unexplained = 0;
  MemRate kv_bytes_per_token{};        // per session, as the context grows
  uint64_t kv_block_bytes = 0;         // commit granularity of growable KV rows on this backend
};

// Bytes per token of a session's category: its bytes divided by its tokens (0 at 0 tokens).
inline double per_token(const SessionMemory& s, MemCategory c) {
  return s.tokens > 0 ? static_cast<double>(s.host[c] + s.device[c]) / static_cast<double>(s.tokens) : 0.0;
}

}  // namespace ds4
