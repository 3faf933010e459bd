// memory_plan.h — the one formula for how many bytes each memory category takes, given a model config,
// a context length and the engine's layout choices (MODEL.md §10.3 plus this engine's ring, frontier,
// block and scratch sizes).
//
// Used by the allocator (KvState commits exactly session_kv_bytes() for the rows it holds), by the
// forward pass (its activation buffers are forward_activation_bytes()) and by `ds4 plan` (before loading anything
// heavy), so the planner and the live accounting agree by construction. Pure arithmetic on the config:
// no backend, no file access.
// Deliberately not here: measuring (the runtime's memory_report), what a device has free (the planner
// asks the runtime), weight bytes (the tensor inventory in the GGUF header gives them).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ds4/memory.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

namespace ds4::modelspec {

// Commit granularity of the growable session rows (compressed attention and indexer rows).
// CPU: 64 KiB = 16 pages, so one mprotect covers 32 ratio-4 attention rows of the real model (128
// tokens) and a session's slack is at most 64 KiB per growable region. CUDA: the VMM allocation
// granularity (2 MiB on Hopper; cuMemGetAllocationGranularity), the smallest physical block the
// driver can map.
inline constexpr uint64_t kCpuKvBlockBytes = uint64_t{64} << 10;
inline constexpr uint64_t kCudaKvBlockBytes = uint64_t{2} << 20;

struct KvLayout {
  int64_t max_chunk = 64;                   // tokens per forward step (raw ring slack, frontier, scratch)
  uint64_t block_bytes = kCpuKvBlockBytes;  // commit granularity of growable rows
};

inline uint64_t round_up(uint64_t v, uint64_t to) { return to ? (v + to - 1) / to * to : v; }

// Raw ring rows per layer: window + max_chunk − 1 (a chunk never overwrites rows it still reads, and the
// last max_chunk − 1 tokens can be dropped without recomputing).
int64_t raw_ring_rows(const ModelConfig& cfg, int64_t max_chunk);
// Compressor frontier ring rows of a compressed layer: the block(s) pooling reads (two with the ratio-4
// overlap) plus max_chunk tokens a cheap rewind may drop, rounded up to whole blocks. 0 for ratio 0.
int64_t frontier_slots(const ModelConfig& cfg, const LayerPlan& p, int64_t max_chunk);
// Compressed rows a layer holds after `tokens` tokens: floor(tokens / ratio) (0 for ratio 0).
int64_t compressed_rows(const LayerPlan& p, int64_t tokens);

// One session's KV state by category after `tokens` tokens, as committed by the allocator: raw rings and
// frontiers are fixed at session creation; compressed and indexer rows are rounded up to whole blocks
// per layer (every other category 0).
MemBytes session_kv_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t tokens,
                          const KvLayout& layout);
// The same without block rounding: bytes that hold rows (what MODEL.md §10.3 tabulates).
MemBytes session_kv_row_bytes(const ModelConfig& cfg, const std::vector<LayerPlan>& plan, int64_t tokens,
                              const KvLayout& layout);
// Growth per token by category as the context grows (rows per token × row bytes, f32): MODEL.md §10.3's
// 13,760 B/token for the real model.
std::array<double, kMemCategoryCount> kv_bytes_per_token(const ModelConfig& cfg, const std::vector<LayerPlan>& plan);
// Host bytes a session keeps besides KV: its token ids (capacity grown in steps of kTokenIdBlock ids) and,
// once it holds a token, one row of logits.
inline constexpr int64_t kTokenIdBlock = 65536;
uint64_t session_host_other_bytes(const ModelConfig& cfg, int64_t tokens);
// The forward pass's per-token activation buffers for max_chunk tokens (f32). Forward adds its step-input
// tables (model::Forward::planned_scratch_bytes is the whole figure, and what alloc_scratch allocates).
uint64_t forward_activation_bytes(const ModelConfig& cfg, int64_t max_chunk);
// The backend's op scratch (per-thread attention/indexer score rows, quantized activations, gathered
// expert batches) at its largest for a chunk of max_chunk tokens at context `tokens`, with `threads` CPU
// threads; `act_row_bytes` is the largest quantized-activation row any weight matrix needs (0 when no
// matrix is quantized: F32/F16 weights take float activations). Ops grow it on first use, so a live run
// reaches this once it has run a full chunk that far (the activations of routed experts are bounded by
// the chunk: an expert sees each token at most once).
uint64_t cpu_op_scratch_bytes(const ModelConfig& cfg, int64_t max_chunk, int64_t tokens, int threads,
                              uint64_t act_row_bytes);

// CUDA attention in the segment order (src/backend/cuda/attention_segments.cu, which static_asserts
// these): a call of few queries (n · heads/(heads per block ≤ 8) ≤ kCudaAttnSplitMaxBlocks, the default
// of CudaBackendOptions::attention_split_max_blocks) keeps one state of head_dim + 2 floats per (query,
// head, kCudaAttnSegmentRows-row segment) in scratch, at most kCudaAttnSplitScratchMax bytes per call.
inline constexpr int64_t kCudaAttnSegmentRows = 32;
inline constexpr int64_t kCudaAttnSplitMaxBlocks = 128;
inline constexpr uint64_t kCudaAttnSplitScratchMax = uint64_t{64} << 20;
// The largest such scratch for steps of ≤ max_chunk queries at context `tokens` (0 when no call splits).
uint64_t cuda_attention_split_bytes(const ModelConfig& cfg, int64_t max_chunk, int64_t tokens);

}  // namespace ds4::modelspec
