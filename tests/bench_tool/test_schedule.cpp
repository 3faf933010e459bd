// test_schedule.cpp — ds4-bench's frontier schedule (tools/ds4-bench/schedule.h): ds4-bench's
// defaults, linear and geometric sweeps, the ctx-alloc default and every rejected combination.
#include <gtest/gtest.h>

#include "schedule.h"

using ds4::bench::effective_ctx_alloc;
using ds4::bench::frontiers;
using ds4::bench::ScheduleOptions;

TEST(BenchSchedule, DefaultsAreDs4Bench) {
  ScheduleOptions o;
  auto f = frontiers(o);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->size(), 16u);  // 2048, 4096, ..., 32768
  EXPECT_EQ(f->front(), 2048);
  EXPECT_EQ(f->back(), 32768);
  EXPECT_EQ(effective_ctx_alloc(o), 32768 + 128 + 1);
}

TEST(BenchSchedule, LinearStopsAtMax) {
  ScheduleOptions o;
  o.ctx_start = 100;
  o.ctx_max = 350;
  o.step_incr = 100;
  auto f = frontiers(o);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<int64_t>{100, 200, 300}));
}

TEST(BenchSchedule, SeedExperiment) {
  ScheduleOptions o;
  o.ctx_start = 10000;
  o.ctx_max = 250000;
  o.step_incr = 10000;
  o.gen_tokens = 0;
  auto f = frontiers(o);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->size(), 25u);
  EXPECT_EQ(f->back(), 250000);
}

TEST(BenchSchedule, Geometric) {
  ScheduleOptions o;
  o.ctx_start = 2048;
  o.ctx_max = 32768;
  o.step_mul = 2;
  auto f = frontiers(o);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<int64_t>{2048, 4096, 8192, 16384, 32768}));
  o.ctx_start = 1;
  o.ctx_max = 4;
  o.step_mul = 1.1;  // rounds back to the same value: must still advance
  f = frontiers(o);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(BenchSchedule, Rejections) {
  auto bad = [](ScheduleOptions o, const char* needle) {
    auto f = frontiers(o);
    ASSERT_FALSE(f.ok()) << needle;
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().message();
  };
  ScheduleOptions o;
  o.ctx_start = 0;
  bad(o, "--ctx-start");
  o = {};
  o.ctx_start = 4096;
  o.ctx_max = 2048;
  bad(o, "--ctx-max");
  o = {};
  o.step_mul = 0.5;
  bad(o, "--step-mul");
  o = {};
  o.step_incr = 0;
  bad(o, "--step-incr");
  o = {};
  o.gen_tokens = -1;
  bad(o, "--gen-tokens");
  o = {};
  o.ctx_alloc = 32768;  // no room for the decode tokens after the last frontier
  bad(o, "--ctx-alloc");
  o.ctx_alloc = 32768 + 128;
  EXPECT_TRUE(frontiers(o).ok());
}
