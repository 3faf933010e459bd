// kv_state.cpp — see kv_state.h.
#include "model/kv_state.h"

#include <algorithm>
#include <cmath>

namespace ds4::model {

static MemCategory comp_category(bool csa) {
  return csa ? MemCategory::compressed_kv_r4 : MemCategory::compressed_kv_rhc;
}

Result<KvState> KvState::create(backend::Backend& be, const modelspec::ModelConfig& cfg,
                                const std::vector<modelspec::LayerPlan>& plan, int64_t raw_cap) {
  KvState s;
  s.be_ = &be;
  s.geo_.raw_cap = raw_cap;
  s.geo_.head_dim = cfg.head_dim;
  s.geo_.index_dim = cfg.indexer_head_dim;
  s.layers_.resize(plan.size());
  for (size_t l = 0; l < plan.size(); ++l) {
    LayerKv& k = s.layers_[l];
    const auto& p = plan[l];
    k.ratio = p.compress_ratio;
    k.has_indexer = p.has_indexer;
    DS4_ASSIGN_OR_RETURN(k.raw, be.alloc(static_cast<uint64_t>(raw_cap * cfg.head_dim) * 4, MemCategory::raw_kv));
    if (p.has_compressor) {
      // Frontier ring: the rows pooling needs (one block, two with overlap) plus room for every token
      // a cheap rewind may drop (as many as the raw ring keeps beyond the window), rounded to blocks.
      const int64_t r = p.compress_ratio;
      const int64_t keep = r * (p.has_indexer ? 2 : 1) + (raw_cap - cfg.sliding_window + 1);
      k.width = p.compressor_width;
      k.slots = (keep + r - 1) / r * r;
      const uint64_t fb = static_cast<uint64_t>(k.slots * k.width) * 4;
      DS4_ASSIGN_OR_RETURN(k.comp_kv, be.alloc(fb, MemCategory::compressor_state));
      DS4_ASSIGN_OR_RETURN(k.comp_score, be.alloc(fb, MemCategory::compressor_state));
      if (p.has_indexer) {
        const uint64_t ib = static_cast<uint64_t>(k.slots * 2 * cfg.indexer_head_dim) * 4;
        DS4_ASSIGN_OR_RETURN(k.index_kv, be.alloc(ib, MemCategory::compressor_state));
        DS4_ASSIGN_OR_RETURN(k.index_score, be.alloc(ib, MemCategory::compressor_state));
      }
      DS4_RETURN_IF_ERROR(s.reserve_comp(l, 16));
    }
  }
  s.reset();
  return s;
}

void KvState::reset() {
  for (auto& k : layers_) {
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

static Status resize_rows(backend::Backend& be, backend::Buffer& buf, int64_t keep_rows, int64_t new_rows,
                          int64_t dim, MemCategory cat) {
  DS4_ASSIGN_OR_RETURN(backend::Buffer nb, be.alloc(static_cast<uint64_t>(new_rows * dim) * 4, cat));
  if (keep_rows > 0 && !buf.empty()) be.copy(nb.data(), buf.data(), static_cast<uint64_t>(keep_rows * dim) * 4);
  buf = std::move(nb);
  return Status::Ok();
}

Status KvState::reserve_comp(size_t l, int64_t rows) {
  LayerKv& k = layers_[l];
  if (k.ratio == 0 || rows <= k.comp_cap) return Status::Ok();
  const int64_t cap = std::max(rows, k.comp_cap * 2);
  DS4_RETURN_IF_ERROR(resize_rows(*be_, k.comp, k.n_comp, cap, geo_.head_dim, comp_category(k.has_indexer)));
  if (!k.index_kv.empty())
    DS4_RETURN_IF_ERROR(resize_rows(*be_, k.index_rows, k.n_comp, cap, geo_.index_dim, MemCategory::indexer_kv));
  k.comp_cap = cap;
  return Status::Ok();
}

Status KvState::shrink_comp(size_t l, int64_t rows) {
  LayerKv& k = layers_[l];
  const int64_t cap = std::max<int64_t>(16, rows);
  if (k.ratio == 0 || cap * 2 > k.comp_cap) return Status::Ok();  // only release large surpluses
  const int64_t keep = std::min(k.n_comp, cap);
  DS4_RETURN_IF_ERROR(resize_rows(*be_, k.comp, keep, cap, geo_.head_dim, comp_category(k.has_indexer)));
  if (!k.index_kv.empty())
    DS4_RETURN_IF_ERROR(resize_rows(*be_, k.index_rows, keep, cap, geo_.index_dim, MemCategory::indexer_kv));
  k.comp_cap = cap;
  return Status::Ok();
}

MemBytes KvState::bytes() const {
  MemBytes m;
  for (const auto& k : layers_) {
    for (const backend::Buffer* b : {&k.raw, &k.comp, &k.index_rows, &k.comp_kv, &k.comp_score, &k.index_kv,
                                     &k.index_score})
      if (!b->empty()) m[b->category()] += b->bytes();
  }
  return m;
}

}  // namespace ds4::model
