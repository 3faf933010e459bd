// test_engine_step.cpp — Engine::step: several sessions advanced in one call end exactly where
// solo Session::eval calls would, and a bad batch changes no session.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "ds4/engine.h"

#include "model_fixture.h"

using namespace ds4;
using namespace ds4::test;

namespace {

// Solo reference: the sequence through one fresh session, token by token after the prompt.
std::vector<float> solo(Engine& e, const std::vector<TokenId>& prompt, const std::vector<TokenId>& decode) {
  auto s = e.new_session().value();
  EXPECT_TRUE(s->eval(prompt).ok());
  std::vector<float> out(s->logits().begin(), s->logits().end());
  for (TokenId t : decode) {
    EXPECT_TRUE(s->eval(std::span<const TokenId>(&t, 1)).ok());
    out.insert(out.end(), s->logits().begin(), s->logits().end());
  }
  return out;
}

}  // namespace

TEST(EngineStep, MixedPrefillAndDecodeEqualSoloRuns) {
  auto engine = open_engine({DS4_TINY_GGUF, Numerics::official, 64});
  ASSERT_TRUE(engine);
  const int V = engine->info().n_vocab;
  // Three sessions with prompts of different lengths; each prefills in chunks sharing the step
  // budget with the others' decode tokens, then all decode together.
  const std::vector<int> prompt_len = {90, 7, 150};
  const int n_decode = 12;
  std::vector<std::vector<TokenId>> prompt, decode;
  for (int i = 0; i < 3; ++i) {
    prompt.push_back(random_tokens(prompt_len[i], V, 11 + i));
    decode.push_back(random_tokens(n_decode, V, 101 + i));
  }
  std::vector<std::unique_ptr<Session>> s;
  std::vector<size_t> fed(3, 0), dec(3, 0);
  std::vector<std::vector<float>> got(3);
  for (int i = 0; i < 3; ++i) s.push_back(engine->new_session().value());
  const int64_t budget = engine->max_step_tokens();
  while (true) {
    std::vector<StepItem> items;
    int64_t used = 0;
    for (int i = 0; i < 3; ++i) {
      if (fed[i] < prompt[i].size()) {
        const size_t m = std::min<size_t>({prompt[i].size() - fed[i], size_t(23), size_t(budget - used)});
        if (m == 0) continue;
        items.push_back({s[i].get(), std::span<const TokenId>(prompt[i]).subspan(fed[i], m)});
        used += static_cast<int64_t>(m);
      } else if (dec[i] < decode[i].size() && used < budget) {
        items.push_back({s[i].get(), std::span<const TokenId>(decode[i]).subspan(dec[i], 1)});
        used += 1;
      }
    }
    if (items.empty()) break;
    ASSERT_TRUE(engine->step(items, {}).ok());
    for (const StepItem& it : items) {
      const int i = static_cast<int>(std::find_if(s.begin(), s.end(), [&](auto& p) { return p.get() == it.session; }) -
                                     s.begin());
      const bool was_prefill = fed[i] < prompt[i].size();
      if (was_prefill) fed[i] += it.tokens.size(); else ++dec[i];
      if (fed[i] == prompt[i].size() && (!was_prefill || dec[i] == 0))
        got[i].insert(got[i].end(), it.session->logits().begin(), it.session->logits().end());
    }
  }
  for (int i = 0; i < 3; ++i) {
    const auto want = solo(*engine, prompt[i], decode[i]);
    ASSERT_EQ(got[i].size(), want.size()) << "session " << i;
    const Diff d = compare(got[i], want, V);
    EXPECT_LE(d.max_abs, 1e-5 * d.max_ref) << "session " << i;
    EXPECT_EQ(d.argmax_mismatch, 0) << "session " << i;
  }
}

TEST(EngineStep, BadBatchChangesNoSession) {
  auto engine = open_engine({DS4_TINY_GGUF, Numerics::official, 64});
  ASSERT_TRUE(engine);
  const int V = engine->info().n_vocab;
  auto a = engine->new_session().value();
  auto b = engine->new_session().value();
  const auto ta = random_tokens(10, V, 1);
  ASSERT_TRUE(a->eval(ta).ok());
  const std::vector<float> before(a->logits().begin(), a->logits().end());
  const auto tb = random_tokens(70, V, 2);  // over the 64-token step limit together with a's token
  const TokenId one = 5;
  std::vector<StepItem> items = {{a.get(), std::span<const TokenId>(&one, 1)}, {b.get(), tb}};
  EXPECT_FALSE(engine->step(items, {}).ok());
  items = {{a.get(), std::span<const TokenId>(&one, 1)}, {a.get(), std::span<const TokenId>(&one, 1)}};
  EXPECT_FALSE(engine->step(items, {}).ok());
  items = {{a.get(), std::span<const TokenId>(&one, 1)}, {b.get(), {}}};
  EXPECT_FALSE(engine->step(items, {}).ok());
  EXPECT_EQ(a->position(), 10);
  EXPECT_EQ(b->position(), 0);
  EXPECT_EQ(std::vector<float>(a->logits().begin(), a->logits().end()), before);
}
