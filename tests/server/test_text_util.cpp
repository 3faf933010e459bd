// test_text_util.cpp — UTF-8 checks, stop-sequence hold-back, ids, sampler, error shapes.
#include <gtest/gtest.h>

#include <set>

#include "server/api_error.h"
#include "server/sampler.h"
#include "server/text_util.h"

namespace ds4::server {
namespace {

TEST(TextUtil, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xFF"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

TEST(TextUtil, Utf8CompletePrefixHoldsBackPartialCharacters) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE4\xB8\xAD"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
}

TEST(TextUtil, StopMatcherAcrossPieces) {
  StopMatcher m({"END", "\n\n"});
  std::string out;
  for (const char* piece : {"hello E", "N", "D world"}) out += m.push(piece);
  EXPECT_TRUE(m.hit());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(out, "hello ");
  EXPECT_EQ(m.push("more"), "");
}

TEST(TextUtil, StopMatcherReleasesNonMatchingPrefix) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abST"), "ab");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.flush(), "ST");
  EXPECT_FALSE(m.hit());
  StopMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(TextUtil, RandomIdsAreUniqueHex) {
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    std::string id = random_id("call_");
    ASSERT_EQ(id.size(), 5u + 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 200u);
}

TEST(Sampler, GreedyAndFilters) {
  std::vector<float> logits = {0.0f, 5.0f, 4.9f, -3.0f};
  SamplingParams greedy;
  greedy.temperature = 0;
  ds4::Sampler g = make_sampler(greedy);
  EXPECT_EQ(g.sample(logits), 1);
  SamplingParams k1;
  k1.top_k = 1;
  ds4::Sampler s1 = make_sampler(k1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s1.sample(logits), 1);
  // min_p 0.5 keeps only tokens within half the best probability: ids 1 and 2.
  SamplingParams mp;
  mp.min_p = 0.5f;
  mp.seed = 7;
  ds4::Sampler s2 = make_sampler(mp);
  for (int i = 0; i < 200; ++i) {
    TokenId t = s2.sample(logits);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  // top_p small keeps the single best token.
  SamplingParams tp;
  tp.top_p = 0.1f;
  tp.min_p = 0;
  ds4::Sampler s3 = make_sampler(tp);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s3.sample(logits), 1);
}

TEST(Sampler, SeedReproduces) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 101) / 20.0f;
  SamplingParams p;
  p.seed = 42;
  p.min_p = 0;
  ds4::Sampler a = make_sampler(p), b = make_sampler(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

TEST(Sampler, LogprobsAreNormalised) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  TokenLogprob lp = token_logprob(logits, 2, 3);
  double sum = 0;
  for (const auto& t : lp.top) sum += std::exp(t.logprob);
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_EQ(lp.top[0].id, 2);
  EXPECT_FLOAT_EQ(lp.logprob, lp.top[0].logprob);
}

TEST(ApiError, Shapes) {
  ApiError e = context_length_error(5000, 4096, "messages");
  Json o = api_error_body(ApiKind::openai_chat, e);
  EXPECT_EQ(o["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(o["error"]["param"], "messages");
  EXPECT_EQ(o["error"]["n_prompt_tokens"], 5000);
  Json a = api_error_body(ApiKind::anthropic_messages, e);
  EXPECT_EQ(a["type"], "error");
  EXPECT_EQ(a["error"]["type"], "invalid_request_error");
  EXPECT_EQ(a["error"]["n_ctx"], 4096);
  EXPECT_EQ(api_error_from_status(unavailable("busy")).http_status, 503);
  EXPECT_EQ(api_error_body(ApiKind::anthropic_messages, api_error_from_status(unavailable("busy")))["error"]["type"],
            "overloaded_error");
  EXPECT_EQ(api_error_from_status(not_found("m")).http_status, 404);
  EXPECT_EQ(api_error_from_status(internal_error("x")).http_status, 500);
}

}  // namespace
}  // namespace ds4::server
