// special_matcher.h — finds added/special-token strings inside text (TOKENIZER.md §6.3):
// leftmost-longest over a fixed set of strings, like HF's added-vocabulary splitter.
// A byte trie with a first-byte filter: the scan costs one table lookup per byte except where a
// byte can start a special string. Immutable after build; safe to share between threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ds4::tokenizer {

class SpecialMatcher {
 public:
  struct Match {
    size_t start = 0;
    size_t length = 0;
    int32_t id = -1;
  };

  // entries: (exact text, token id); empty strings are ignored; on duplicates the last wins.
  void build(const std::vector<std::pair<std::string_view, int32_t>>& entries);
  bool empty() const { return nodes_.size() <= 1; }
  // Leftmost-longest match at or after `from`; false when there is none.
  bool find(std::string_view text, size_t from, Match& m) const;
  size_t memory_bytes() const;

 private:
  struct Node {
    int32_t id = -1;           // token id when a string ends here
    uint32_t first_edge = 0;   // edges_[first_edge, first_edge + n_edges), sorted by byte
    uint32_t n_edges = 0;
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  int32_t child(uint32_t node, uint8_t b) const;

  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::array<bool, 256> first_{};
};

}  // namespace ds4::tokenizer
