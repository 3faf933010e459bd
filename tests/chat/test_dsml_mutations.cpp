// test_dsml_mutations.cpp — runs the fuzz properties of fuzz/dsml (dsml_fuzz_entry.cpp) with gcc
// over the seeds plus deterministic random mutations (byte edits, DSML marker splices,
// truncations), so the robustness checks run in every ctest without libFuzzer. A violated
// property aborts the test program.
#include <gtest/gtest.h>

#include <random>

#include "../../fuzz/dsml/dsml_fuzz_entry.h"

namespace ds4::chat {
namespace {

const char* const kDictionary[] = {
    "</think>", "<｜end▁of▁sentence｜>", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
    "<｜DSML｜invoke name=\"", "</｜DSML｜invoke>", "<｜DSML｜parameter name=\"", "</｜DSML｜parameter>",
    "\" string=\"true\">", "\" string=\"false\">", "<DSML｜", "<parameter name=\"x\">", "</parameter>",
    "&amp;", "&lt;", "&", "\n\n", "{\"a\": [1, {\"b\": null}]}", "\xF0\x9F\x8C", "\xE4\xB8", "\"", ">", "<",
    "{\"messages\":[", "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":", "\"content\":[",
};

std::string mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : size_t(rng() % n); };
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0: if (s.size() > 2) s[2 + pick(s.size() - 2)] = char(rng()); break;
      case 1: s.insert(s.begin() + 2 + pick(s.size() - 1), char(rng())); break;
      case 2: if (s.size() > 3) { size_t p = 2 + pick(s.size() - 2); s.erase(p, 1 + pick(16)); } break;
      case 3: {
        const char* d = kDictionary[pick(std::size(kDictionary))];
        s.insert(2 + pick(s.size() - 1), d);
        break;
      }
      case 4: if (s.size() > 2) s.resize(2 + pick(s.size() - 1)); break;
      case 5: if (s.size() > 4) { size_t p = 2 + pick(s.size() - 2); s.insert(p, s.substr(p, 1 + pick(24))); } break;
      case 6: s[0] = char(rng()); s[1] = char(rng()); break;
    }
  }
  return s;
}

void run(const std::string& s) {
  fuzz::run_one(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(DsmlMutations, SeedsSatisfyProperties) {
  const auto seeds = fuzz::seeds();
  ASSERT_GT(seeds.size(), 10u);
  for (const std::string& s : seeds) run(s);
}

TEST(DsmlMutations, RandomMutationsSatisfyProperties) {
  const auto seeds = fuzz::seeds();
  std::mt19937 rng(20261129);
  for (int i = 0; i < 100000; ++i) {
    std::string s = mutate(seeds[rng() % seeds.size()], rng);
    if (rng() % 4 == 0) s = mutate(s, rng);
    run(s);
  }
}

}  // namespace
}  // namespace ds4::chat
