// model_fixture.cpp — see model_fixture.h.
#include "model_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace ds4::test {

std::unique_ptr<Engine> open_engine(const EngineSpec& spec) {
  EngineOptions o;
  o.model_path = spec.path;
  o.numerics = spec.numerics;
  o.max_chunk = spec.max_chunk;
  o.n_threads = 2;
  o.shared_expert_clamp = spec.shared_expert_clamp;
  o.cuda_graphs = spec.cuda_graphs;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return nullptr;
  return std::move(e).value();
}

std::vector<TokenId> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  if (n > 0) t[0] = 0;
  return t;
}

std::vector<float> logits_chunked(Engine& e, const std::vector<TokenId>& tokens, const std::vector<int>& chunks) {
  const int V = e.info().n_vocab;
  auto s = e.new_session();
  EXPECT_TRUE(s.ok());
  std::vector<float> all(tokens.size() * V), part;
  size_t done = 0, ci = 0;
  while (done < tokens.size()) {
    const size_t m = std::min<size_t>(static_cast<size_t>(chunks[ci++ % chunks.size()]), tokens.size() - done);
    EvalOptions eo;
    eo.chunk = static_cast<int32_t>(m);
    Status st = (*s)->eval_all(std::span<const TokenId>(tokens).subspan(done, m), part, eo);
    EXPECT_TRUE(st.ok()) << st.to_string();
    std::copy(part.begin(), part.end(), all.begin() + done * V);
    done += m;
  }
  return all;
}

std::vector<float> logits_decode(Engine& e, const std::vector<TokenId>& tokens) {
  const int V = e.info().n_vocab;
  auto s = e.new_session();
  EXPECT_TRUE(s.ok());
  std::vector<float> all(tokens.size() * V);
  for (size_t i = 0; i < tokens.size(); ++i) {
    Status st = (*s)->eval(std::span<const TokenId>(&tokens[i], 1));
    EXPECT_TRUE(st.ok()) << st.to_string();
    auto l = (*s)->logits();
    std::copy(l.begin(), l.end(), all.begin() + i * V);
  }
  return all;
}

Diff compare(const std::vector<float>& a, const std::vector<float>& b, int vocab) {
  Diff d;
  const size_t rows = std::min(a.size(), b.size()) / vocab;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = &a[r * vocab];
    const float* y = &b[r * vocab];
    for (int v = 0; v < vocab; ++v) {
      d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(x[v] - y[v])));
      d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(y[v])));
    }
    if (std::max_element(x, x + vocab) - x != std::max_element(y, y + vocab) - y) ++d.argmax_mismatch;
  }
  return d;
}

}  // namespace ds4::test
