// merge_table.cpp — see merge_table.h.
#include "tokenizer/merge_table.h"

#include <algorithm>

namespace ds4::tokenizer {

namespace {
constexpr uint32_t kNoRank = UINT32_MAX;
// Pieces up to this many symbols use the quadratic scan (cheaper than a heap for short words;
// CJK runs and long identifiers go to the heap).
constexpr size_t kShortPiece = 24;
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

void MergeTable::apply(std::vector<int32_t>& syms, std::vector<int32_t>& out, Scratch& scratch) const {
  if (syms.size() <= 1) {
    out.insert(out.end(), syms.begin(), syms.end());
  } else if (syms.size() <= kShortPiece) {
    apply_short(syms, out);
  } else {
    apply_long(syms, out, scratch);
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

void MergeTable::apply_long(std::vector<int32_t>& syms, std::vector<int32_t>& out, Scratch& sc) const {
  // Symbols form a doubly linked list over their original positions; a merged symbol keeps the
  // left position, and a consumed one is marked by prev = -2. Heap entries are validated lazily
  // when popped: (rank, pos) order = lowest rank first, leftmost on ties.
  const int32_t n = int32_t(syms.size());
  sc.prev.resize(size_t(n));
  sc.next.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    sc.prev[i] = i - 1;
    sc.next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Cand = Scratch::Cand;
  auto later = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  sc.heap.clear();
  auto push = [&](int32_t i) {
    if (i < 0 || sc.next[i] < 0) return;
    if (const Merge* m = find(syms[i], syms[sc.next[i]])) {
      sc.heap.push_back({m->rank, i, syms[i], syms[sc.next[i]]});
      std::push_heap(sc.heap.begin(), sc.heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const Merge* m = find(syms[i], syms[i + 1])) sc.heap.push_back({m->rank, i, syms[i], syms[i + 1]});
  }
  std::make_heap(sc.heap.begin(), sc.heap.end(), later);
  while (!sc.heap.empty()) {
    std::pop_heap(sc.heap.begin(), sc.heap.end(), later);
    const Cand c = sc.heap.back();
    sc.heap.pop_back();
    const int32_t i = c.pos;
    if (sc.prev[i] == -2 || syms[i] != c.left || sc.next[i] < 0 || syms[sc.next[i]] != c.right) continue;
    const int32_t j = sc.next[i];
    syms[i] = find(c.left, c.right)->result;
    sc.prev[j] = -2;
    sc.next[i] = sc.next[j];
    if (sc.next[j] >= 0) sc.prev[sc.next[j]] = i;
    push(sc.prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = sc.next[i]) out.push_back(syms[i]);
}

}  // namespace ds4::tokenizer
