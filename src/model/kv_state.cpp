// kv_state.cpp — see kv_state.h.
#include "model/kv_state.h"

#include <algorithm>
#include <cmath>

namespace ds4::model {

static MemCategory comp_category(bool csa) {
  return csa ? MemCategory::compressed_kv_r4 : MemCategory::compressed_kv_rhc;
}

Result<KvState> KvState::create(backend::Backend& be, const modelspec::ModelConfig& cfg,
                                const std::vector<modelspec::LayerPlan>& plan, const modelspec::KvLayout& layout,
                                int64_t max_context) {
  if (max_context < 1) return invalid_argument("kv state: the context limit must be >= 1");
  KvState s;
  s.be_ = &be;
  s.geo_.raw_cap = modelspec::raw_ring_rows(cfg, layout.max_chunk);
  s.geo_.head_dim = cfg.head_dim;
  s.geo_.index_dim = cfg.indexer_head_dim;
  s.geo_.max_context = max_context;
  s.layers_.resize(plan.size());
  for (size_t l = 0; l < plan.size(); ++l) {
    LayerKv& k = s.layers_[l];
    const auto& p = plan[l];
    k.ratio = p.compress_ratio;
    k.has_indexer = p.has_indexer;
    DS4_ASSIGN_OR_RETURN(k.raw, be.alloc(static_cast<uint64_t>(s.geo_.raw_cap * cfg.head_dim) * 4, MemCategory::raw_kv));
    if (!p.has_compressor) continue;
    k.width = p.compressor_width;
    k.slots = modelspec::frontier_slots(cfg, p, layout.max_chunk);
    const uint64_t fb = static_cast<uint64_t>(k.slots * k.width) * 4;
    DS4_ASSIGN_OR_RETURN(k.comp_kv, be.alloc(fb, MemCategory::compressor_state));
    DS4_ASSIGN_OR_RETURN(k.comp_score, be.alloc(fb, MemCategory::compressor_state));
    // Address space for every row the context limit allows; memory is committed as rows arrive.
    const uint64_t max_rows = static_cast<uint64_t>(modelspec::compressed_rows(p, max_context));
    DS4_ASSIGN_OR_RETURN(k.comp, be.reserve_region(max_rows * cfg.head_dim * 4, comp_category(p.has_indexer)));
    if (p.has_indexer) {
      const uint64_t ib = static_cast<uint64_t>(k.slots * 2 * cfg.indexer_head_dim) * 4;
      DS4_ASSIGN_OR_RETURN(k.index_kv, be.alloc(ib, MemCategory::compressor_state));
      DS4_ASSIGN_OR_RETURN(k.index_score, be.alloc(ib, MemCategory::compressor_state));
      DS4_ASSIGN_OR_RETURN(k.index_rows,
                           be.reserve_region(max_rows * cfg.indexer_head_dim * 4, MemCategory::indexer_kv));
    }
  }
  s.reset();
  return s;
}

void KvState::reset() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerKv& k = layers_[l];
    k.n_comp = 0;
    if (k.ratio == 0) continue;
    be_->fill_f32(k.comp_kv.f32(), 0.0f, static_cast<int64_t>(k.comp_kv.bytes() / 4));
    be_->fill_f32(k.comp_score.f32(), -INFINITY, static_cast<int64_t>(k.comp_score.bytes() / 4));
    if (!k.index_kv.empty()) {
      be_->fill_f32(k.index_kv.f32(), 0.0f, static_cast<int64_t>(k.index_kv.bytes() / 4));
      be_->fill_f32(k.index_score.f32(), -INFINITY, static_cast<int64_t>(k.index_score.bytes() / 4));
    }
  }
}

// Commits exactly the blocks `rows` rows need in both regions of layer l (grows or shrinks).
Status KvState::resize(size_t l, int64_t rows) {
  LayerKv& k = layers_[l];
  DS4_RETURN_IF_ERROR(be_->resize_region(k.comp, static_cast<uint64_t>(rows * geo_.head_dim) * 4));
  int64_t cap = static_cast<int64_t>(k.comp.committed() / (static_cast<uint64_t>(geo_.head_dim) * 4));
  if (!k.index_rows.empty()) {
    DS4_RETURN_IF_ERROR(be_->resize_region(k.index_rows, static_cast<uint64_t>(rows * geo_.index_dim) * 4));
    cap = std::min<int64_t>(cap, static_cast<int64_t>(k.index_rows.committed() / (static_cast<uint64_t>(geo_.index_dim) * 4)));
  }
  k.comp_cap = cap;
  return Status::Ok();
}

Status KvState::reserve_comp(size_t l, int64_t rows) {
  LayerKv& k = layers_[l];
  if (k.ratio == 0 || rows <= k.comp_cap) return Status::Ok();
  const Status st = resize(l, rows);
  if (!st.ok())
    return st.with_context("layer " + std::to_string(l) + " needs " + std::to_string(rows) + " compressed rows");
  return st;
}

Status KvState::shrink_comp(size_t l, int64_t rows) {
  LayerKv& k = layers_[l];
  if (k.ratio == 0 || rows >= k.comp_cap) return Status::Ok();
  return resize(l, std::max(rows, k.n_comp));
}

Status KvState::trim() {
  for (size_t l = 0; l < layers_.size(); ++l) DS4_RETURN_IF_ERROR(shrink_comp(l, layers_[l].n_comp));
  return Status::Ok();
}

MemBytes KvState::bytes() const {
  MemBytes m;
  for (const auto& k : layers_) {
    for (const backend::Buffer* b : {&k.raw, &k.comp_kv, &k.comp_score, &k.index_kv, &k.index_score})
      if (!b->empty()) m[b->category()] += b->bytes();
    for (const backend::Region* r : {&k.comp, &k.index_rows})
      if (!r->empty()) m[r->category()] += r->committed();
  }
  return m;
}

}  // namespace ds4::model
