// kv_state.h — one session's attention state (MODEL.md §10): per layer the raw KV ring, compressed
// attention rows, indexer rows and both compressor frontiers, plus the row counts.
//
// Owned by a runtime Session; the forward pass reads and appends. Memory tracks the tokens held: the
// raw rings and frontiers are small and fixed at creation (MODEL.md §10.1), while compressed and indexer
// rows live in backend Regions that reserve address space for the session's context limit and commit
// memory block by block as rows are added (released again on rewind and reset). Rows stay contiguous,
// so ops index them directly. Every byte is counted by category where it is allocated, and the counts
// equal modelspec::session_kv_bytes() by construction (the same formula sizes the blocks).
// Deliberately not here: tokens and logits (runtime), the math (forward.cpp), block sizes (memory_plan).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "ds4/memory.h"
#include "ds4/status.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "modelspec/memory_plan.h"

namespace ds4::model {

struct LayerKv {
  uint32_t ratio = 0;
  bool has_indexer = false;     // CSA layer: indexer rows and frontier exist
  backend::Buffer raw;          // [raw_cap][D] f32 ring: position p at row p mod raw_cap
  backend::Region comp;         // [comp_cap][D] compressed attention rows, row B = block B
  backend::Region index_rows;   // [comp_cap][ID] indexer rows (ratio 4 only)
  int64_t comp_cap = 0;         // rows committed in comp (and index_rows)
  int64_t n_comp = 0;           // rows written (= floor(T / ratio))
  backend::Buffer comp_kv, comp_score;    // [slots][width] attention compressor frontier ring
  backend::Buffer index_kv, index_score;  // [slots][2·ID] indexer compressor frontier ring (CSA)
  int64_t slots = 0, width = 0;           // frontier geometry: token t in row t mod slots
};

struct KvGeometry {
  // Ring rows = window + max chunk − 1: a chunk never overwrites rows it reads, and the last
  // max_chunk − 1 tokens can be dropped without recomputing (Session::rewind's cheap path).
  int64_t raw_cap = 0;
  int64_t head_dim = 0;    // D
  int64_t index_dim = 0;   // ID
  int64_t max_context = 0; // tokens the compressed regions are reserved for
};

class KvState {
 public:
  // layout.block_bytes is ignored: the backend's region_block_bytes() decides the commit granularity.
  static Result<KvState> create(backend::Backend& be, const modelspec::ModelConfig& cfg,
                                const std::vector<modelspec::LayerPlan>& plan, const modelspec::KvLayout& layout,
                                int64_t max_context);
  KvState() = default;
  KvState(KvState&&) = default;
  KvState& operator=(KvState&&) = default;

  // Empty timeline: no rows, frontiers kv = 0 and score = −inf. Committed blocks are kept (a replay or
  // restore refills them at once); trim() gives back what the new timeline does not use.
  void reset();
  // Makes room for `rows` compressed (and indexer) rows in layer l, preserving the existing ones.
  Status reserve_comp(size_t l, int64_t rows);
  // Releases the compressed-row blocks of layer l beyond what `rows` rows need (rewind).
  Status shrink_comp(size_t l, int64_t rows);
  // shrink_comp of every layer to the rows it holds (n_comp).
  Status trim();

  std::vector<LayerKv>& layers() { return layers_; }
  const std::vector<LayerKv>& layers() const { return layers_; }
  const KvGeometry& geometry() const { return geo_; }
  MemBytes bytes() const;

 private:
  Status resize(size_t l, int64_t rows);

  backend::Backend* be_ = nullptr;
  KvGeometry geo_;
  std::vector<LayerKv> layers_;
};

}  // namespace ds4::model
