// special_matcher.cpp — see special_matcher.h.
#include "tokenizer/special_matcher.h"

#include <algorithm>
#include <map>

namespace ds4::tokenizer {

void SpecialMatcher::build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
  // Build with a map-based trie, then flatten into sorted edge arrays.
  struct TmpNode {
    int32_t id = -1;
    std::map<uint8_t, uint32_t> kids;
  };
  std::vector<TmpNode> tmp(1);
  first_.fill(false);
  for (const auto& [text, id] : entries) {
    if (text.empty()) continue;
    first_[uint8_t(text[0])] = true;
    uint32_t n = 0;
    for (unsigned char c : text) {
      auto it = tmp[n].kids.find(c);
      if (it == tmp[n].kids.end()) {
        tmp.push_back({});
        it = tmp[n].kids.emplace(c, uint32_t(tmp.size() - 1)).first;
      }
      n = it->second;
    }
    tmp[n].id = id;
  }
  nodes_.assign(tmp.size(), Node{});
  edges_.clear();
  for (size_t i = 0; i < tmp.size(); ++i) {
    nodes_[i].id = tmp[i].id;
    nodes_[i].first_edge = uint32_t(edges_.size());
    nodes_[i].n_edges = uint32_t(tmp[i].kids.size());
    for (const auto& [b, c] : tmp[i].kids) edges_.push_back({b, c});
  }
}

int32_t SpecialMatcher::child(uint32_t node, uint8_t b) const {
  const Node& n = nodes_[node];
  const Edge* lo = edges_.data() + n.first_edge;
  const Edge* hi = lo + n.n_edges;
  const Edge* e = std::lower_bound(lo, hi, b, [](const Edge& x, uint8_t v) { return x.byte < v; });
  return (e != hi && e->byte == b) ? int32_t(e->child) : -1;
}

bool SpecialMatcher::find(std::string_view text, size_t from, Match& m) const {
  if (empty()) return false;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = from; i < n; ++i) {
    if (!first_[s[i]]) continue;
    int32_t node = 0;
    size_t best_len = 0;
    int32_t best_id = -1;
    for (size_t j = i; j < n; ++j) {
      node = child(uint32_t(node), s[j]);
      if (node < 0) break;
      if (nodes_[node].id >= 0) {
        best_len = j - i + 1;
        best_id = nodes_[node].id;
      }
    }
    if (best_id >= 0) {
      m = {i, best_len, best_id};
      return true;
    }
  }
  return false;
}

size_t SpecialMatcher::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + edges_.capacity() * sizeof(Edge);
}

}  // namespace ds4::tokenizer
