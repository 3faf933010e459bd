// merge_table.h — the BPE merge ranks as an open-addressing hash map keyed by the id pair, and the
// merge loop over one pre-token piece (TOKENIZER.md §5).
//
// Merges work on token ids, never on strings: a piece starts as the ids of its single-byte symbols
// and each merge (left, right) -> result replaces two adjacent ids by one. The lowest rank wins;
// ties go to the leftmost pair, which is what HF's BPE does (its priority queue orders by
// (rank, position)). Short pieces use an O(n²) scan with cached pair ranks; long pieces (long
// words, space runs) use a heap so that a megabyte-long piece stays O(n log n).
// Owned by the tokenizer; immutable after build, so safe to share between threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::tokenizer {

class MergeTable {
 public:
  struct Merge {
    uint32_t rank;    // 0 = applied first
    int32_t result;   // id of the merged token
  };

  // Capacity for n merges (load factor <= 0.5).
  void reserve(size_t n);
  // Adds a merge; when the same pair is added twice the later rank is kept (as ds4's map does).
  void add(int32_t left, int32_t right, uint32_t rank, int32_t result);

  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }
  size_t memory_bytes() const { return slots_.capacity() * sizeof(Slot); }

  // Working memory for long pieces, owned by the caller (one per encode call, reused across
  // pieces so the merge loop allocates nothing in the steady state).
  struct Scratch {
    struct Cand {
      uint32_t rank;
      int32_t pos;
      int32_t left, right;
    };
    std::vector<int32_t> prev, next;
    std::vector<Cand> heap;
  };

  // Runs BPE on `syms` (the piece's byte-symbol ids, modified in place as scratch) and appends the
  // resulting ids to out.
  void apply(std::vector<int32_t>& syms, std::vector<int32_t>& out, Scratch& scratch) const;

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return size_t(k);
  }
  void grow();
  void apply_short(std::vector<int32_t>& syms, std::vector<int32_t>& out) const;
  void apply_long(std::vector<int32_t>& syms, std::vector<int32_t>& out, Scratch& scratch) const;

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ds4::tokenizer
