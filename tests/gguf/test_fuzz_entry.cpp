// test_fuzz_entry.cpp — runs the libFuzzer entry (fuzz/gguf/fuzz_gguf.cpp) without libFuzzer:
// over the seed corpus, then over a few thousand deterministic random mutations of it, so every
// gcc build exercises the fuzz properties (the entry aborts if one is violated).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "gguf/gguf.h"
#include "seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ds4::gguf {
namespace {

TEST(GgufFuzzEntry, SeedsAreValidAndPassTheProperties) {
  auto seeds = fuzz::seed_images();
  ASSERT_GE(seeds.size(), 4u);
  for (const auto& s : seeds) {
    EXPECT_TRUE(File::from_memory(s.bytes).ok()) << s.name;
    EXPECT_LT(s.bytes.size(), 4096u) << s.name;
    EXPECT_EQ(LLVMFuzzerTestOneInput(s.bytes.data(), s.bytes.size()), 0);
  }
}

// One structure-blind mutation, biased toward what breaks parsers: counts and lengths.
void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % (n ? n : 1)); };
  static const uint64_t kInteresting[] = {0, 1, 2, 7, 8, 9, 31, 32, 33, 255, 256, 65535, 1ull << 31, 1ull << 32,
                                          (1ull << 62), (1ull << 63), std::numeric_limits<uint64_t>::max()};
  switch (rng() % 7) {
    case 0:  // flip a bit
      if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:  // random byte
      if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng());
      break;
    case 2: {  // overwrite 4 or 8 bytes with an interesting value
      size_t w = rng() % 2 ? 8 : 4;
      if (b.size() >= w) {
        uint64_t v = kInteresting[pick(sizeof kInteresting / sizeof kInteresting[0])];
        std::memcpy(&b[pick(b.size() - w + 1)], &v, w);
      }
      break;
    }
    case 3:  // truncate
      b.resize(pick(b.size() + 1));
      break;
    case 4: {  // insert random bytes
      size_t at = pick(b.size() + 1);
      size_t n = 1 + rng() % 16;
      std::vector<uint8_t> ins(n);
      for (auto& x : ins) x = static_cast<uint8_t>(rng());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
      break;
    }
    case 5: {  // erase a range
      if (b.empty()) break;
      size_t at = pick(b.size());
      size_t n = std::min(b.size() - at, 1 + pick(16));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 6: {  // duplicate a chunk (repeats records)
      if (b.size() < 2) break;
      size_t at = pick(b.size());
      size_t n = std::min(b.size() - at, 1 + pick(64));
      std::vector<uint8_t> chunk(b.begin() + static_cast<std::ptrdiff_t>(at),
                                 b.begin() + static_cast<std::ptrdiff_t>(at + n));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), chunk.begin(), chunk.end());
      break;
    }
  }
}

TEST(GgufFuzzEntry, RandomMutationsOfTheSeeds) {
  auto seeds = fuzz::seed_images();
  std::mt19937_64 rng(20261129);
  size_t accepted = 0;
  constexpr int kRuns = 5000;
  for (int run = 0; run < kRuns; ++run) {
    std::vector<uint8_t> b = seeds[run % seeds.size()].bytes;
    int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mut; ++m) mutate(b, rng);
    // Exact-size heap copy so any over-read leaves the allocation (caught under ASan builds).
    std::vector<uint8_t> exact(b);
    ASSERT_EQ(LLVMFuzzerTestOneInput(exact.data(), exact.size()), 0);
    accepted += File::from_memory(exact).ok();
  }
  // Some mutations keep the file valid (payload bytes, string contents), most do not.
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, static_cast<size_t>(kRuns));
  std::printf("[ info ] %d mutated inputs, %zu accepted\n", kRuns, accepted);
}

}  // namespace
}  // namespace ds4::gguf
