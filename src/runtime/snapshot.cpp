// snapshot.cpp — Session::snapshot / restore: the complete state of a timeline as versioned bytes.
//
// Layout (little-endian):
//   header: "DS4CSNAP" (8 bytes), u32 version (1 = f32 rows, 2 = compact rows), u32 n_layer, u32 head_dim, u32 index_dim, u32 vocab,
//           u32 window, u64 n_tokens T
//   i32[T] tokens; f32[V] next-token logits (only when T > 0)
//   per layer: u32 ratio; f32[min(T, window)][D] raw rows, oldest first;
//     ratio ≠ 0: u64 n_comp (= floor(T/ratio)); f32[n_comp][D] rows; frontier kv then score of the
//       tokens pooling still needs, oldest first: f32[nf][width] each, nf = T − start,
//       start = max(0, ⌊T/r⌋·r − (CSA ? r : 0)) (independent of the engine's frontier ring size);
//     CSA (ratio 4): f32[n_comp][ID] indexer rows; indexer frontier kv, score: f32[nf][2·ID] each.
// Version 2 (SnapshotFormat::compact) is the same sequence, but every row array above (raw, compressed,
// frontier, indexer) is written as u64 packed bytes + row_pack.h groups: the FP8/FP4/f16-rounded values
// the model keeps take 1 byte, half a byte or 2 bytes each, losslessly (checked at encode time).
// restore() accepts both and validates the whole payload against the model before touching the session.
// Deliberately not here: ds4's own payload format (MODEL.md Appendix B) and the server's disk cache.
#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/engine_impl.h"
#include "runtime/row_pack.h"

namespace ds4::runtime {
namespace {

constexpr char kMagic[8] = {'D', 'S', '4', 'C', 'S', 'N', 'A', 'P'};
constexpr uint32_t kVersionF32 = 1, kVersionCompact = 2;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void put(T v) { raw(&v, sizeof(T)); }
  void raw(const void* p, size_t n) {
    const size_t off = out_.size();
    out_.resize(off + n);
    if (n) std::memcpy(out_.data() + off, p, n);
  }
  uint8_t* reserve(size_t n) {
    const size_t off = out_.size();
    out_.resize(off + n);
    return out_.data() + off;
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  Status get(T& v, const char* what) {
    const uint8_t* p;
    DS4_RETURN_IF_ERROR(take(sizeof(T), &p, what));
    std::memcpy(&v, p, sizeof(T));
    return Status::Ok();
  }
  Status take(uint64_t n, const uint8_t** p, const char* what) {
    if (n > in_.size() - pos_)
      return invalid_data(std::string("snapshot: truncated at byte ") + std::to_string(pos_) + " reading " + what);
    *p = in_.data() + pos_;
    pos_ += n;
    return Status::Ok();
  }
  bool at_end() const { return pos_ == in_.size(); }

  // One row array of n_rows x width floats: in place for version 1, decoded into storage this
  // reader owns for version 2 (the pointer stays valid while the reader lives).
  Status rows(uint64_t n_rows, int64_t width, const uint8_t** p, const char* what) {
    if (!compact_) return take(n_rows * width * 4, p, what);
    uint64_t len;
    DS4_RETURN_IF_ERROR(get(len, what));
    const uint8_t* src;
    DS4_RETURN_IF_ERROR(take(len, &src, what));
    // Every group costs at least its tag byte: bounds what a short hostile section can make us allocate.
    const uint64_t groups = n_rows * static_cast<uint64_t>((width + kPackGroup - 1) / kPackGroup);
    if (len < groups) return invalid_data(std::string("snapshot: packed ") + what + " too short");
    staging_.emplace_back(n_rows * width);
    Status st = unpack_rows({src, len}, width, staging_.back());
    if (!st.ok()) return st.with_context(std::string("snapshot: ") + what);
    *p = reinterpret_cast<const uint8_t*>(staging_.back().data());
    return Status::Ok();
  }
  void set_compact(bool c) { compact_ = c; }

 private:
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
  bool compact_ = false;
  std::vector<std::vector<float>> staging_;
};

// One row array being written: version 1 downloads rows straight into the output, version 2 into
// a staging buffer that is packed (u64 size + groups) when the array is complete.
class RowSection {
 public:
  RowSection(Writer& w, std::vector<uint8_t>& out, bool compact, int64_t n_rows, int64_t width)
      : w_(w), out_(out), compact_(compact), width_(width) {
    if (compact_) staging_.resize(static_cast<size_t>(n_rows * width));
    else dst_ = w_.reserve(static_cast<size_t>(n_rows * width * 4));
  }
  void* row(int64_t i) {
    return compact_ ? static_cast<void*>(staging_.data() + i * width_) : static_cast<void*>(dst_ + i * width_ * 4);
  }
  void finish() {
    if (!compact_) return;
    const size_t at = out_.size();
    w_.put(uint64_t{0});
    pack_rows(staging_, width_, out_);
    const uint64_t len = out_.size() - at - 8;
    std::memcpy(out_.data() + at, &len, 8);
  }

 private:
  Writer& w_;
  std::vector<uint8_t>& out_;
  bool compact_;
  int64_t width_;
  uint8_t* dst_ = nullptr;
  std::vector<float> staging_;
};

// First token whose compressor inputs are still needed after T tokens (current block, plus the
// previous one for the overlapping CSA compressor).
int64_t frontier_start(const model::LayerKv& k, int64_t T) {
  const int64_t r = k.ratio;
  return std::max<int64_t>(0, T / r * r - (k.has_indexer ? r : 0));
}

}  // namespace

Result<SessionSnapshot> SessionImpl::snapshot(SnapshotFormat format) const {
  // Logits deferred by a greedy step are computed first (logically const: see logits()).
  if (logits_deferred_) DS4_RETURN_IF_ERROR(const_cast<SessionImpl*>(this)->ensure_logits().with_context("snapshot"));
  const auto& cfg = engine_.config();
  backend::Backend& be = *engine_.forward_backend();
  const bool compact = format == SnapshotFormat::compact;
  SessionSnapshot snap;
  Writer w(snap.bytes);
  const uint64_t T = tokens_.size();
  const int64_t D = cfg.head_dim, ID = cfg.indexer_head_dim, V = cfg.n_vocab, W = cfg.sliding_window;
  w.raw(kMagic, 8);
  w.put(compact ? kVersionCompact : kVersionF32);
  w.put(cfg.n_layer);
  w.put(cfg.head_dim);
  w.put(cfg.indexer_head_dim);
  w.put(cfg.n_vocab);
  w.put(cfg.sliding_window);
  w.put(T);
  w.raw(tokens_.data(), T * sizeof(TokenId));
  if (T > 0) w.raw(logits_.data(), static_cast<size_t>(V) * 4);
  const int64_t cap = kv_.geometry().raw_cap;
  const int64_t n_raw = std::min<int64_t>(static_cast<int64_t>(T), W);
  for (const model::LayerKv& k : kv_.layers()) {
    w.put(k.ratio);
    {
      RowSection raw(w, snap.bytes, compact, n_raw, D);
      for (int64_t j = 0; j < n_raw; ++j) {
        const int64_t p = static_cast<int64_t>(T) - n_raw + j;
        be.download(raw.row(j), k.raw.f32() + (p % cap) * D, D * 4);
      }
      raw.finish();
    }
    if (k.ratio == 0) continue;
    w.put(static_cast<uint64_t>(k.n_comp));
    {
      RowSection comp(w, snap.bytes, compact, k.n_comp, D);
      if (k.n_comp) be.download(comp.row(0), k.comp.data(), k.n_comp * D * 4);
      comp.finish();
    }
    const int64_t T64 = static_cast<int64_t>(T);
    const int64_t start = frontier_start(k, T64);
    auto frontier = [&](const backend::Buffer& buf, int64_t width) {
      RowSection f(w, snap.bytes, compact, T64 - start, width);
      for (int64_t p = start; p < T64; ++p)
        be.download(f.row(p - start), buf.f32() + (p % k.slots) * width, width * 4);
      f.finish();
    };
    frontier(k.comp_kv, k.width);
    frontier(k.comp_score, k.width);
    if (k.has_indexer) {
      {
        RowSection irows(w, snap.bytes, compact, k.n_comp, ID);
        if (k.n_comp) be.download(irows.row(0), k.index_rows.data(), k.n_comp * ID * 4);
        irows.finish();
      }
      frontier(k.index_kv, 2 * ID);
      frontier(k.index_score, 2 * ID);
    }
  }
  return snap;
}

Status SessionImpl::restore(const SessionSnapshot& snap) {
  const auto& cfg = engine_.config();
  backend::Backend& be = *engine_.forward_backend();
  const int64_t D = cfg.head_dim, ID = cfg.indexer_head_dim, V = cfg.n_vocab, W = cfg.sliding_window;
  Reader r(snap.bytes);
  const uint8_t* p;
  DS4_RETURN_IF_ERROR(r.take(8, &p, "magic"));
  if (std::memcmp(p, kMagic, 8) != 0) return invalid_data("snapshot: not a ds4cpp session snapshot");
  uint32_t version, n_layer, hd, idd, vocab, window;
  uint64_t T;
  DS4_RETURN_IF_ERROR(r.get(version, "version"));
  if (version != kVersionF32 && version != kVersionCompact)
    return invalid_data("snapshot: version " + std::to_string(version) + " is not supported");
  r.set_compact(version == kVersionCompact);
  DS4_RETURN_IF_ERROR(r.get(n_layer, "layer count"));
  DS4_RETURN_IF_ERROR(r.get(hd, "head dim"));
  DS4_RETURN_IF_ERROR(r.get(idd, "indexer dim"));
  DS4_RETURN_IF_ERROR(r.get(vocab, "vocab"));
  DS4_RETURN_IF_ERROR(r.get(window, "window"));
  DS4_RETURN_IF_ERROR(r.get(T, "token count"));
  if (n_layer != cfg.n_layer || hd != cfg.head_dim || idd != cfg.indexer_head_dim || vocab != cfg.n_vocab ||
      window != cfg.sliding_window)
    return invalid_data("snapshot: taken with a different model shape");
  if (T > static_cast<uint64_t>(max_context_))
    return invalid_data("snapshot: " + std::to_string(T) + " tokens exceed this session's context limit");

  // Pass 1: validate every length and value range without touching the session.
  const int64_t n_raw = std::min<int64_t>(static_cast<int64_t>(T), W);
  struct LayerSpan { const uint8_t *raw, *comp, *ckv, *csc, *irows, *ikv, *isc; };
  std::vector<LayerSpan> spans(n_layer);
  const uint8_t* tok;
  const uint8_t* lg = nullptr;
  DS4_RETURN_IF_ERROR(r.take(T * 4, &tok, "tokens"));
  for (uint64_t i = 0; i < T; ++i) {
    int32_t id;
    std::memcpy(&id, tok + 4 * i, 4);
    if (id < 0 || id >= static_cast<int32_t>(V)) return invalid_data("snapshot: token id out of range");
  }
  if (T > 0) DS4_RETURN_IF_ERROR(r.take(V * 4, &lg, "logits"));
  for (uint32_t l = 0; l < n_layer; ++l) {
    const model::LayerKv& k = kv_.layers()[l];
    uint32_t ratio;
    DS4_RETURN_IF_ERROR(r.get(ratio, "layer ratio"));
    if (ratio != k.ratio) return invalid_data("snapshot: layer " + std::to_string(l) + " ratio mismatch");
    DS4_RETURN_IF_ERROR(r.rows(n_raw, D, &spans[l].raw, "raw rows"));
    if (ratio == 0) continue;
    uint64_t n_comp;
    DS4_RETURN_IF_ERROR(r.get(n_comp, "compressed row count"));
    if (n_comp != T / ratio) return invalid_data("snapshot: layer " + std::to_string(l) + " row count mismatch");
    DS4_RETURN_IF_ERROR(r.rows(n_comp, D, &spans[l].comp, "compressed rows"));
    const uint64_t nf = T - static_cast<uint64_t>(frontier_start(k, static_cast<int64_t>(T)));
    DS4_RETURN_IF_ERROR(r.rows(nf, k.width, &spans[l].ckv, "compressor frontier"));
    DS4_RETURN_IF_ERROR(r.rows(nf, k.width, &spans[l].csc, "compressor frontier"));
    if (k.has_indexer) {
      DS4_RETURN_IF_ERROR(r.rows(n_comp, ID, &spans[l].irows, "indexer rows"));
      DS4_RETURN_IF_ERROR(r.rows(nf, 2 * ID, &spans[l].ikv, "indexer frontier"));
      DS4_RETURN_IF_ERROR(r.rows(nf, 2 * ID, &spans[l].isc, "indexer frontier"));
    }
  }
  if (!r.at_end()) return invalid_data("snapshot: trailing bytes");
  for (uint32_t l = 0; l < n_layer; ++l) DS4_RETURN_IF_ERROR(kv_.reserve_comp(l, T / std::max(1u, kv_.layers()[l].ratio)));

  // Pass 2: apply.
  kv_.reset();
  const int64_t cap = kv_.geometry().raw_cap;
  for (uint32_t l = 0; l < n_layer; ++l) {
    model::LayerKv& k = kv_.layers()[l];
    const LayerSpan& s = spans[l];
    for (int64_t j = 0; j < n_raw; ++j) {
      const int64_t pos = static_cast<int64_t>(T) - n_raw + j;
      be.upload(k.raw.f32() + (pos % cap) * D, s.raw + j * D * 4, D * 4);
    }
    if (k.ratio == 0) continue;
    k.n_comp = static_cast<int64_t>(T / k.ratio);
    be.upload(k.comp.data(), s.comp, k.n_comp * D * 4);
    const int64_t T64 = static_cast<int64_t>(T), start = frontier_start(k, T64);
    auto frontier = [&](backend::Buffer& buf, const uint8_t* src, int64_t width) {
      for (int64_t p = start; p < T64; ++p)
        be.upload(buf.f32() + (p % k.slots) * width, src + (p - start) * width * 4, width * 4);
    };
    frontier(k.comp_kv, s.ckv, k.width);
    frontier(k.comp_score, s.csc, k.width);
    if (k.has_indexer) {
      be.upload(k.index_rows.data(), s.irows, k.n_comp * ID * 4);
      frontier(k.index_kv, s.ikv, 2 * ID);
      frontier(k.index_score, s.isc, 2 * ID);
    }
  }
  tokens_.resize(T);
  if (T) std::memcpy(tokens_.data(), tok, T * 4);
  ring_floor_ = static_cast<int64_t>(T);
  logits_.clear();
  logits_deferred_ = false;
  if (T > 0) {
    logits_.resize(static_cast<size_t>(V));
    std::memcpy(logits_.data(), lg, V * 4);
  }
  return kv_.trim();  // a session that held more rows before gives the extra blocks back
}

}  // namespace ds4::runtime
