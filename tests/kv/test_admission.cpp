// test_admission.cpp — kv::decide_admission: the session limit, reservations against the KV budget,
// least-recently-used idle sessions evicted first (never the one being reused), waiting when running
// jobs hold the room, refusing a request larger than the whole budget; derive_max_sessions.
#include <gtest/gtest.h>

#include <vector>

#include "kv/admission.h"

namespace ds4::kv {
namespace {

TEST(Admission, SessionLimitMakesTheRequestWait) {
  AdmissionOptions o{.budget_bytes = 0, .max_sessions = 2};
  EXPECT_EQ(decide_admission(o, {.running = 1}).verdict, AdmitVerdict::admit);
  AdmitDecision d = decide_admission(o, {.running = 2});
  EXPECT_EQ(d.verdict, AdmitVerdict::wait);
  EXPECT_NE(d.reason.find("2 sessions"), std::string::npos);
}

TEST(Admission, EvictsLeastRecentlyUsedIdleSessionsFirst) {
  AdmissionOptions o{.budget_bytes = 1000, .max_sessions = 8};
  std::vector<IdleSession> idle = {{.slot = 0, .bytes = 300, .last_used = 5},
                                   {.slot = 1, .bytes = 300, .last_used = 1},
                                   {.slot = 2, .bytes = 300, .last_used = 9}};
  // 200 reserved + 900 idle: a 200-byte job needs the oldest idle session gone (slot 1), a 500-byte
  // job the two oldest (slots 1 then 0).
  AdmitDecision d = decide_admission(o, {.running = 1, .reserved_bytes = 200, .idle = idle, .need_bytes = 200});
  ASSERT_EQ(d.verdict, AdmitVerdict::admit);
  EXPECT_EQ(d.evict, (std::vector<size_t>{1}));
  d = decide_admission(o, {.running = 1, .reserved_bytes = 200, .idle = idle, .need_bytes = 500});
  EXPECT_EQ(d.evict, (std::vector<size_t>{1, 0}));
  // The session the job takes over is never evicted, and its bytes become the job's.
  d = decide_admission(o, {.running = 1, .reserved_bytes = 200, .idle = idle, .reuse_slot = 1, .need_bytes = 400});
  ASSERT_EQ(d.verdict, AdmitVerdict::admit);
  EXPECT_EQ(d.evict, (std::vector<size_t>{0}));
}

TEST(Admission, WaitsWhenRunningJobsHoldTheRoomAndRejectsWhatNeverFits) {
  AdmissionOptions o{.budget_bytes = 1000, .max_sessions = 8};
  AdmitDecision d = decide_admission(o, {.running = 2, .reserved_bytes = 800, .need_bytes = 300});
  EXPECT_EQ(d.verdict, AdmitVerdict::wait);
  EXPECT_TRUE(d.evict.empty());
  EXPECT_NE(d.reason.find("KV budget full"), std::string::npos);
  d = decide_admission(o, {.running = 0, .need_bytes = 1001});
  EXPECT_EQ(d.verdict, AdmitVerdict::reject);
  EXPECT_NE(d.reason.find("more than the server's KV budget"), std::string::npos);
  EXPECT_EQ(decide_admission(o, {.running = 2, .reserved_bytes = 700, .need_bytes = 300}).verdict, AdmitVerdict::admit);
}

TEST(Admission, CostModelAndDerivedSessionCount) {
  KvCostModel c{.fixed_bytes = 1000, .bytes_per_token = 10};
  EXPECT_EQ(c.bytes_for(0), 1000u);
  EXPECT_EQ(c.bytes_for(100), 2000u);
  EXPECT_EQ(derive_max_sessions(20000, c, 100, 64), 10);
  EXPECT_EQ(derive_max_sessions(2000000, c, 100, 32), 32);  // capped by the step budget
  EXPECT_EQ(derive_max_sessions(10, c, 100, 32), 1);        // at least one
  EXPECT_EQ(derive_max_sessions(0, c, 100, 16), 16);        // no budget: the cap
}

}  // namespace
}  // namespace ds4::kv
