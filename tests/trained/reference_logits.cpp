// reference_logits.cpp — see reference_logits.h.
#include "reference_logits.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

namespace ds4::trained_test {
namespace {

class Reader {
 public:
  explicit Reader(std::vector<char> bytes) : b_(std::move(bytes)) {}
  bool u32(uint32_t& v) { return raw(&v, 4); }
  bool f32(float& v) { return raw(&v, 4); }
  bool raw(void* dst, size_t n) {
    if (n > b_.size() - p_) return false;
    std::memcpy(dst, b_.data() + p_, n);
    p_ += n;
    return true;
  }
  template <class T>
  bool vec(std::vector<T>& v, size_t n) {
    if (n > (b_.size() - p_) / sizeof(T)) return false;
    v.resize(n);
    return raw(v.data(), n * sizeof(T));
  }
  bool done() const { return p_ == b_.size(); }

 private:
  std::vector<char> b_;
  size_t p_ = 0;
};

}  // namespace

double RefSequence::mean_nll() const {
  double s = 0;
  for (size_t t = 0; t + 1 < pos.size(); ++t) s += pos[t].nll_next;
  return pos.size() > 1 ? s / double(pos.size() - 1) : 0.0;
}

double RefSequence::perplexity() const { return std::exp(mean_nll()); }

Result<RefFile> read_reference_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("reference logits: cannot open " + path);
  Reader r(std::vector<char>(std::istreambuf_iterator<char>(f), {}));
  char magic[8];
  uint32_t n_seq = 0, n_top = 0, n_fixed = 0, reserved = 0;
  if (!r.raw(magic, 8) || std::memcmp(magic, "DS4REFL1", 8) != 0)
    return invalid_data("reference logits: " + path + " does not start with DS4REFL1");
  if (!r.u32(n_seq) || !r.u32(n_top) || !r.u32(n_fixed) || !r.u32(reserved) || n_seq > 64 || n_top > 4096 ||
      n_fixed > 65536)
    return invalid_data("reference logits: bad header in " + path);
  RefFile out;
  if (!r.vec(out.fixed_ids, n_fixed)) return invalid_data("reference logits: truncated fixed ids");
  for (uint32_t s = 0; s < n_seq; ++s) {
    RefSequence q;
    uint32_t name_len = 0, T = 0;
    if (!r.u32(name_len) || name_len > 256) return invalid_data("reference logits: bad name length");
    q.name.resize(name_len);
    if (!r.raw(q.name.data(), name_len) || !r.u32(T) || !r.u32(q.vocab) || T == 0 || T > 1u << 20)
      return invalid_data("reference logits: bad sequence header");
    if (!r.vec(q.ids, T)) return invalid_data("reference logits: truncated ids of " + q.name);
    q.pos.resize(T);
    for (auto& p : q.pos) {
      if (!r.f32(p.max_abs) || !r.f32(p.lse) || !r.f32(p.nll_next) || !r.vec(p.top_ids, n_top) ||
          !r.vec(p.top_vals, n_top) || !r.vec(p.fixed_vals, n_fixed))
        return invalid_data("reference logits: truncated positions of " + q.name);
    }
    out.seqs.push_back(std::move(q));
  }
  if (!r.done()) return invalid_data("reference logits: trailing bytes in " + path);
  return out;
}

}  // namespace ds4::trained_test
