// test_policy.cpp — ds4's save policy: defaults, cold anchor/trim/align, continued frontiers,
// evict/shutdown thresholds, knob validation.
#include <gtest/gtest.h>

#include "kvstore/save_policy.h"

namespace ds4::kvstore {
namespace {

TEST(SavePolicy, DefaultsAreDs4s) {
  SavePolicy p;
  EXPECT_EQ(p.min_tokens, 512);
  EXPECT_EQ(p.cold_max_tokens, 30000);
  EXPECT_EQ(p.continued_interval_tokens, 10000);
  EXPECT_EQ(p.boundary_trim_tokens, 32);
  EXPECT_EQ(p.boundary_align_tokens, 2048);
  EXPECT_TRUE(validate(p).ok());
  EXPECT_EQ(continued_interval(p), 10240);  // 10000 rounded up to the 2048 alignment
}

TEST(SavePolicy, ValidateRejectsBadKnobs) {
  SavePolicy p;
  p.min_tokens = 0;
  EXPECT_EQ(validate(p).code(), StatusCode::invalid_argument);
  p = {};
  p.cold_max_tokens = 100;  // below min 512
  EXPECT_FALSE(validate(p).ok());
  p = {};
  p.cold_max_tokens = 0;  // 0 disables: fine
  EXPECT_TRUE(validate(p).ok());
  p = {};
  p.boundary_align_tokens = -1;
  EXPECT_FALSE(validate(p).ok());
  p = {};
  p.continued_interval_tokens = -5;
  EXPECT_FALSE(validate(p).ok());
}

TEST(SavePolicy, ColdAnchorIsLastUserBeforeFirstAssistant) {
  const int32_t U = 128803, A = 128804;
  std::vector<int32_t> t = {0, 5, U, 6, 7, U, 8, A, 9, U, 10, A};
  EXPECT_EQ(find_cold_anchor(t, U, A), 5);
  std::vector<int32_t> none = {1, 2, A, U};
  EXPECT_FALSE(find_cold_anchor(none, U, A).has_value());
  std::vector<int32_t> no_assistant = {U, 1, U, 2};
  EXPECT_EQ(find_cold_anchor(no_assistant, U, A), 2);
}

TEST(SavePolicy, ColdSaveLength) {
  SavePolicy p;
  // Outside [min, cold_max]: no save.
  EXPECT_FALSE(cold_save_length(p, 511, std::nullopt));
  EXPECT_FALSE(cold_save_length(p, 30001, std::nullopt));
  // Anchor >= min wins.
  EXPECT_EQ(cold_save_length(p, 5000, 600), 600);
  EXPECT_EQ(cold_save_length(p, 5000, 5000), 5000);
  // Anchor too short: trim 32 then align down to 2048.
  EXPECT_EQ(cold_save_length(p, 5000, 100), 4096);
  EXPECT_EQ(cold_save_length(p, 4128, std::nullopt), 4096);
  EXPECT_EQ(cold_save_length(p, 4127, std::nullopt), 2048);
  // Aligned length below min: nothing.
  EXPECT_FALSE(cold_save_length(p, 2000, std::nullopt));
  // No alignment: just the trim.
  p.boundary_align_tokens = 0;
  EXPECT_EQ(cold_save_length(p, 2000, std::nullopt), 1968);
  p.boundary_trim_tokens = 0;
  EXPECT_EQ(cold_save_length(p, 2000, std::nullopt), 2000);
  // Disabled.
  p.cold_max_tokens = 0;
  EXPECT_FALSE(cold_save_length(p, 2000, std::nullopt));
}

TEST(SavePolicy, ContinuedFrontiers) {
  SavePolicy p;
  EXPECT_EQ(next_continued_save(p, 0), 10240);
  EXPECT_EQ(next_continued_save(p, 4096), 10240);  // after a cold save
  EXPECT_EQ(next_continued_save(p, 10240), 20480);
  EXPECT_EQ(next_continued_save(p, 10241), 20480);
  EXPECT_FALSE(continued_save_due(p, 0, 10239));
  EXPECT_TRUE(continued_save_due(p, 0, 10240));
  EXPECT_TRUE(continued_save_due(p, 0, 10242));  // a multi-token step jumped over it
  EXPECT_FALSE(continued_save_due(p, 10240, 10300));
  p.continued_interval_tokens = 0;
  EXPECT_FALSE(next_continued_save(p, 0));
  EXPECT_FALSE(continued_save_due(p, 0, 1 << 20));
  // Interval below min_tokens never yields a frontier shorter than min_tokens.
  p = {};
  p.boundary_align_tokens = 1;
  p.continued_interval_tokens = 100;
  EXPECT_EQ(next_continued_save(p, 0), 600);
  EXPECT_EQ(next_continued_save(p, 600), 700);
}

TEST(SavePolicy, LiveSaves) {
  SavePolicy p;
  EXPECT_FALSE(should_save_live(p, 511));
  EXPECT_TRUE(should_save_live(p, 512));
  EXPECT_TRUE(usable_prefix(p, 512));
  EXPECT_FALSE(usable_prefix(p, 100));
  EXPECT_STREQ(save_reason_name(SaveReason::continued), "continued");
}

}  // namespace
}  // namespace ds4::kvstore
