// merge_table.cpp — see merge_table.h.
#include "tokenizer/merge_table.h"

#include <algorithm>
#include <queue>

namespace ds4::tokenizer {

namespace {
constexpr uint32_t kNoRank = UINT32_MAX;
// Pieces up to this many symbols use the quadratic scan (cheaper than a heap for short words).
constexpr size_t kShortPiece = 48;
}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
  for (const Slot& s : old)
    if (s.key != kEmpty) add(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.merge.rank, s.merge.result);
}

void MergeTable::grow() { reserve(std::max<size_t>(16, size_ + 1)); }

void MergeTable::add(int32_t left, int32_t right, uint32_t rank, int32_t result) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = {rank, result};
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.merge = {rank, result};
      ++size_;
      return;
    }
  }
}

void MergeTable::apply(std::vector<int32_t>& syms, std::vector<int32_t>& out) const {
  if (syms.size() <= 1) {
    out.insert(out.end(), syms.begin(), syms.end());
  } else if (syms.size() <= kShortPiece) {
    apply_short(syms, out);
  } else {
    apply_long(syms, out);
  }
}

void MergeTable::apply_short(std::vector<int32_t>& syms, std::vector<int32_t>& out) const {
  // rank[i] / res[i] describe the pair (syms[i], syms[i+1]); only the neighbours of a merge change.
  size_t n = syms.size();
  uint32_t rank[kShortPiece];
  int32_t res[kShortPiece];
  for (size_t i = 0; i + 1 < n; ++i) {
    const Merge* m = find(syms[i], syms[i + 1]);
    rank[i] = m ? m->rank : kNoRank;
    res[i] = m ? m->result : -1;
  }
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < n; ++i)
      if (rank[i] < best_rank) { best_rank = rank[i]; best = i; }  // strict <: leftmost on ties
    if (best_rank == kNoRank) break;
    syms[best] = res[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      if (i + 1 < n - 1) { rank[i] = rank[i + 1]; res[i] = res[i + 1]; }
    }
    --n;
    if (best + 1 < n) {
      const Merge* m = find(syms[best], syms[best + 1]);
      rank[best] = m ? m->rank : kNoRank;
      res[best] = m ? m->result : -1;
    }
    if (best > 0) {
      const Merge* m = find(syms[best - 1], syms[best]);
      rank[best - 1] = m ? m->rank : kNoRank;
      res[best - 1] = m ? m->result : -1;
    }
  }
  out.insert(out.end(), syms.begin(), syms.begin() + ptrdiff_t(n));
}

void MergeTable::apply_long(std::vector<int32_t>& syms, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over their original positions; a merged symbol keeps the
  // left position. Heap entries are validated lazily when popped.
  const size_t n = syms.size();
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = find(syms[i], syms[next[i]])) heap.push({m->rank, i, syms[i], syms[next[i]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int32_t i = c.pos;
    if (dead[i] || syms[i] != c.left || next[i] < 0 || syms[next[i]] != c.right) continue;
    const int32_t j = next[i];
    syms[i] = find(c.left, c.right)->result;
    dead[j] = true;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(syms[i]);
}

}  // namespace ds4::tokenizer
