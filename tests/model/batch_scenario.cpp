// batch_scenario.cpp — see batch_scenario.h.
#include "batch_scenario.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "model_fixture.h"

namespace ds4::test {

std::vector<BatchRequest> mixed_requests(int vocab) {
  // {join step, prompt length, decode tokens, chunk pattern}
  struct Shape {
    int join, len, n_decode;
    std::vector<int> chunks;
  };
  const std::vector<Shape> shapes = {
      {0, 5, 20, {5}},        // short, decodes across the window and the first ratio-4/16 rows
      {0, 19, 30, {7, 3}},    // crosses the window during prefill
      {1, 70, 14, {23, 11}},  // indexer selects from position 68 on
      {3, 150, 26, {64}},     // long prefill cut by the budget; crosses ratio-16 row 8 (position 128)
      {6, 33, 40, {13}},
      {10, 1, 9, {1}},        // joins late, one-token prompt
      {12, 66, 12, {2, 64}},  // reaches the indexer threshold while decoding
  };
  std::vector<BatchRequest> r;
  uint32_t seed = 500;
  for (const Shape& s : shapes) r.push_back({s.join, random_tokens(s.len, vocab, ++seed), s.n_decode, s.chunks});
  return r;
}

std::vector<BatchRequest> steady_requests(int vocab) {
  std::vector<BatchRequest> r;
  uint32_t seed = 700;
  for (int len : {9, 22, 35, 50}) r.push_back({0, random_tokens(len, vocab, ++seed), 60, {64}});
  return r;
}

namespace {
TokenId argmax(std::span<const float> l) {
  return static_cast<TokenId>(std::max_element(l.begin(), l.end()) - l.begin());
}
}  // namespace

BatchRun run_batched(Engine& e, const std::vector<BatchRequest>& reqs, bool& ok) {
  ok = true;
  const size_t R = reqs.size();
  BatchRun out;
  out.decoded.resize(R);
  out.logits.resize(R);
  std::vector<std::unique_ptr<Session>> s(R);
  std::vector<size_t> fed(R, 0), chunk_i(R, 0);
  std::vector<bool> done(R, false);
  std::vector<TokenId> next(R);
  const int64_t budget = e.max_step_tokens();
  for (int step = 0;; ++step) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    std::vector<StepItem> items;
    std::vector<size_t> who;
    int64_t used = 0;
    bool has_prefill = false, has_decode = false;
    // Rotate the order so every request is sometimes first and sometimes cut by the budget.
    for (size_t k = 0; k < R; ++k) {
      const size_t i = (k + static_cast<size_t>(step)) % R;
      if (done[i] || reqs[i].join_step > step || used >= budget) continue;
      if (!s[i]) s[i] = e.new_session().value();
      const BatchRequest& q = reqs[i];
      if (fed[i] < q.prompt.size()) {
        const int64_t want = q.chunks[chunk_i[i]++ % q.chunks.size()];
        const int64_t m = std::min<int64_t>({want, static_cast<int64_t>(q.prompt.size() - fed[i]), budget - used});
        items.push_back({s[i].get(), std::span<const TokenId>(q.prompt).subspan(fed[i], static_cast<size_t>(m))});
        used += m;
        has_prefill = true;
      } else {
        next[i] = argmax(s[i]->logits());
        items.push_back({s[i].get(), std::span<const TokenId>(&next[i], 1)});
        used += 1;
        has_decode = true;
      }
      who.push_back(i);
    }
    if (items.empty()) continue;  // nobody has joined yet
    Status st = e.step(items, {});
    EXPECT_TRUE(st.ok()) << "step " << step << ": " << st.to_string();
    if (!st.ok()) {
      ok = false;
      return out;
    }
    ++out.steps;
    out.max_items = std::max(out.max_items, static_cast<int>(items.size()));
    out.mixed_steps += has_prefill && has_decode;
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      const BatchRequest& q = reqs[i];
      const bool was_prefill = fed[i] < q.prompt.size();
      if (was_prefill) {
        fed[i] += items[j].tokens.size();
        if (fed[i] < q.prompt.size()) continue;
      } else {
        out.decoded[i].push_back(next[i]);
      }
      auto l = s[i]->logits();
      out.logits[i].insert(out.logits[i].end(), l.begin(), l.end());
      if (static_cast<int>(out.decoded[i].size()) == q.n_decode) {
        done[i] = true;
        s[i].reset();  // leaves mid-run
      }
    }
  }
  return out;
}

BatchRun run_solo(Engine& e, const std::vector<BatchRequest>& reqs, const std::vector<std::vector<TokenId>>& decoded) {
  BatchRun out;
  out.decoded = decoded;
  out.logits.resize(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto s = e.new_session().value();
    Status st = s->eval(reqs[i].prompt);
    EXPECT_TRUE(st.ok()) << st.to_string();
    out.logits[i].assign(s->logits().begin(), s->logits().end());
    for (TokenId t : decoded[i]) {
      st = s->eval(std::span<const TokenId>(&t, 1));
      EXPECT_TRUE(st.ok()) << st.to_string();
      out.logits[i].insert(out.logits[i].end(), s->logits().begin(), s->logits().end());
    }
  }
  return out;
}

}  // namespace ds4::test
