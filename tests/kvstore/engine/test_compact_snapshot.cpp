// test_compact_snapshot.cpp — compact session snapshots (SnapshotFormat::compact, runtime/row_pack):
// the packer stores each 64-value group in the narrowest exact form and refuses anything it could
// not restore bit for bit; on the tiny model a compact snapshot restores the very state of the f32
// one (same continuation logits, same f32 re-snapshot bytes) in official numerics, where it is
// ~4x smaller, and in reference numerics, where nothing is narrow and it falls back to f32;
// damaged compact snapshots are errors, never a crash or a changed session.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "ds4/engine.h"
#include "quant/half.h"
#include "kvrows_fuzz_entry.h"
#include "runtime/row_pack.h"

namespace ds4::runtime {
namespace {

std::vector<uint8_t> pack(const std::vector<float>& v, int64_t width) {
  std::vector<uint8_t> out;
  pack_rows(v, width, out);
  return out;
}

void expect_round_trip(const std::vector<float>& v, int64_t width, size_t expect_bytes) {
  const auto p = pack(v, width);
  EXPECT_EQ(p.size(), expect_bytes);
  std::vector<float> back(v.size());
  ASSERT_TRUE(unpack_rows(p, width, back).ok());
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(v[i])) << "value " << i;
}

// MODEL.md §5.4: x <- s * e4m3(x / s), s = 2^ceil(log2(amax / 448)). Rounding by search over the
// 254 finite codes keeps this independent of the packer's bit tricks.
float e4m3_round(float v) {
  float best = 0, bd = INFINITY;
  for (int e = 0; e < 16; ++e)
    for (int m = 0; m < 8; ++m) {
      if (e == 15 && m == 7) continue;
      const float mag = e == 0 ? m / 512.0f : std::ldexp(1.0f + m / 8.0f, e - 7);
      for (float c : {mag, -mag})
        if (std::fabs(c - v) < bd) bd = std::fabs(c - v), best = c;
    }
  return best;
}
std::vector<float> fp8_block(std::mt19937& rng, float spread) {
  std::normal_distribution<float> nd(0, spread);
  std::vector<float> x(64);
  float amax = 1e-4f;
  for (auto& v : x) amax = std::max(amax, std::fabs(v = nd(rng)));
  const float s = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / 448.0f))));
  for (auto& v : x) v = s * e4m3_round(std::clamp(v / s, -448.0f, 448.0f));
  return x;
}

TEST(RowPack, EachGroupTakesTheNarrowestExactForm) {
  std::mt19937 rng(3);
  // FP8 blocks at several scales: tag + exponent + 64 codes.
  for (float spread : {1e-6f, 0.01f, 1.0f, 300.0f}) expect_round_trip(fp8_block(rng, spread), 64, 1 + 1 + 64);
  // FP4 (E2M1) blocks of 32 with their own power-of-two scales: tag + 2 exponents + 32 bytes.
  std::vector<float> fp4(64);
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 64; ++i) fp4[i] = std::ldexp(mags[rng() % 8], i < 32 ? -5 : 3) * ((rng() & 1) ? -1.0f : 1.0f);
  expect_round_trip(fp4, 64, 1 + 2 + 32);
  // f16-exact values that are no FP8 block: 2 bytes each.
  std::vector<float> h(64);
  for (int i = 0; i < 64; ++i) h[i] = round_f16(0.001f * static_cast<float>(i * 37 + 11));
  expect_round_trip(h, 64, 1 + 128);
  // Anything else stays f32, including NaN payloads and f32 subnormals.
  std::vector<float> f(64);
  for (int i = 0; i < 64; ++i) f[i] = 1.0f + static_cast<float>(i) * 1e-7f;
  f[5] = std::bit_cast<float>(0x7fc01234u);
  f[6] = std::bit_cast<float>(0x00000003u);
  expect_round_trip(f, 64, 1 + 256);
  // +0.0 groups cost only their tag; -0.0 is not +0.0 but is exact in E2M1.
  expect_round_trip(std::vector<float>(128, 0.0f), 64, 2);
  expect_round_trip(std::vector<float>(64, -0.0f), 64, 1 + 2 + 32);
  // A 512-wide attention row: 7 FP8 groups + 1 f16 (RoPE) group; rows restart groups.
  std::vector<float> row;
  for (int r = 0; r < 3; ++r) {
    for (int g = 0; g < 7; ++g) {
      auto b = fp8_block(rng, 0.5f);
      row.insert(row.end(), b.begin(), b.end());
    }
    for (int i = 0; i < 64; ++i) row.push_back(round_f16(std::sin(static_cast<float>(i + r))));
  }
  expect_round_trip(row, 512, 3 * (7 * 66 + 129));
  // Width not a multiple of 64: the tail group of each row is shorter.
  std::vector<float> odd(2 * 70, 0.25f);
  expect_round_trip(odd, 70, 2 * (1 + 2 + 32) + 2 * (1 + 1 + 3));
}

TEST(RowPack, HostileBytesAreErrors) {
  std::mt19937 rng(5);
  const auto good = pack(fp8_block(rng, 1.0f), 64);
  std::vector<float> out(64);
  auto bad = [&](std::vector<uint8_t> p) { return !unpack_rows(p, 64, out).ok(); };
  EXPECT_TRUE(bad({}));
  EXPECT_TRUE(bad({9}));                                         // unknown tag
  EXPECT_TRUE(bad(std::vector<uint8_t>(good.begin(), good.end() - 1)));  // truncated
  auto longer = good;
  longer.push_back(0);
  EXPECT_TRUE(bad(longer));  // trailing bytes
  auto nan = good;
  nan[2] = 0x7f;
  EXPECT_TRUE(bad(nan));  // E4M3 NaN code
  auto exp = good;
  exp[1] = 0x80;  // exponent -128: 2^k not a normal float
  EXPECT_TRUE(bad(exp));
  // Every single-byte mutation either decodes to 64 finite-or-not floats or is an error: no crash.
  for (size_t i = 0; i < good.size(); ++i)
    for (int b = 0; b < 8; ++b) {
      auto m = good;
      m[i] ^= static_cast<uint8_t>(1u << b);
      (void)unpack_rows(m, 64, out);
    }
}

// The libFuzzer entry (fuzz/kvrows) under gcc: packed rows from real FP8/FP4/f16 groups with random
// byte mutations, and random float bits.
TEST(RowPack, FuzzEntryOnMutatedInputs) {
  std::mt19937 rng(8);
  std::vector<uint8_t> base = {63};  // width 64
  for (int g = 0; g < 3; ++g) pack_rows(fp8_block(rng, 0.3f), 64, base);
  for (int i = 0; i < 64; ++i) {
    std::vector<float> h(64, round_f16(static_cast<float>(i) * 0.37f));
    pack_rows(h, 64, base);
  }
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> in = base;
    const int muts = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < muts; ++m) {
      const size_t at = rng() % in.size();
      switch (rng() % 3) {
        case 0: in[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: in.resize(at + 1); break;
        default: in[at] = static_cast<uint8_t>(rng()); break;
      }
    }
    ds4::fuzz::kvrows_fuzz_one(in.data(), in.size());
  }
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> in(1 + rng() % 2000);
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    ds4::fuzz::kvrows_fuzz_one(in.data(), in.size());
  }
}

class CompactSnapshot : public ::testing::TestWithParam<Numerics> {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_path = DS4_TINY_GGUF;
    o.n_threads = 2;
    o.numerics = GetParam();
    auto e = Engine::open(o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    std::mt19937 rng(11);
    tokens_.resize(203);  // not a multiple of any ratio: frontiers are partly filled
    for (auto& t : tokens_) t = static_cast<TokenId>(rng() % static_cast<uint32_t>(engine_->info().n_vocab));
  }
  std::unique_ptr<Engine> engine_;
  std::vector<TokenId> tokens_;
};

TEST_P(CompactSnapshot, RestoresExactlyTheF32State) {
  auto a = engine_->new_session();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->eval(tokens_).ok());
  auto f32 = (*a)->snapshot(SnapshotFormat::f32);
  auto compact = (*a)->snapshot(SnapshotFormat::compact);
  ASSERT_TRUE(f32.ok() && compact.ok());
  const double ratio = static_cast<double>(compact->bytes.size()) / static_cast<double>(f32->bytes.size());
  std::printf("[ info ] %s numerics: f32 snapshot %zu B, compact %zu B (%.3f)\n",
              GetParam() == Numerics::official ? "official" : "reference", f32->bytes.size(), compact->bytes.size(),
              ratio);
  if (GetParam() == Numerics::official) {
    // Growth over 256 more tokens (same frontier fill, same SWA window): only compressed attention
    // rows (FP8 nope + f16 RoPE) and indexer rows (FP4) are added, which pack ~3.5-7x.
    auto longer = engine_->new_session();
    ASSERT_TRUE(longer.ok());
    std::vector<TokenId> more_tokens = tokens_;
    for (int i = 0; i < 256; ++i) more_tokens.push_back(static_cast<TokenId>((i * 7919) % engine_->info().n_vocab));
    ASSERT_TRUE((*longer)->eval(more_tokens).ok());
    auto f32_l = (*longer)->snapshot(SnapshotFormat::f32);
    auto compact_l = (*longer)->snapshot(SnapshotFormat::compact);
    ASSERT_TRUE(f32_l.ok() && compact_l.ok());
    const double growth_f32 = static_cast<double>(f32_l->bytes.size() - f32->bytes.size());
    const double growth_compact = static_cast<double>(compact_l->bytes.size() - compact->bytes.size());
    std::printf("[ info ] per token: f32 %.1f B, compact %.1f B (%.3f)\n", growth_f32 / 256, growth_compact / 256,
                growth_compact / growth_f32);
    EXPECT_LT(growth_compact, 0.35 * growth_f32);
    EXPECT_LT(compact->bytes.size(), f32->bytes.size());
  } else {
    EXPECT_LE(compact->bytes.size(), f32->bytes.size() + f32->bytes.size() / 32);
  }

  auto b = engine_->new_session();
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->restore(*compact).ok());
  auto again = (*b)->snapshot(SnapshotFormat::f32);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->bytes, f32->bytes);  // the very same state

  const std::vector<TokenId> more = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE((*a)->eval(more).ok());
  ASSERT_TRUE((*b)->eval(more).ok());
  ASSERT_EQ((*a)->logits().size(), (*b)->logits().size());
  for (size_t i = 0; i < (*a)->logits().size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>((*a)->logits()[i]), std::bit_cast<uint32_t>((*b)->logits()[i])) << i;
}

TEST_P(CompactSnapshot, DamagedCompactSnapshotsAreRejected) {
  auto a = engine_->new_session();
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->eval(tokens_).ok());
  auto compact = (*a)->snapshot(SnapshotFormat::compact);
  ASSERT_TRUE(compact.ok());
  auto b = engine_->new_session();
  ASSERT_TRUE(b.ok());
  const std::vector<TokenId> head(tokens_.begin(), tokens_.begin() + 9);
  ASSERT_TRUE((*b)->eval(head).ok());
  const std::vector<float> logits_before((*b)->logits().begin(), (*b)->logits().end());
  // Truncations at 41 places and flipped bytes past the header: an error or (for bytes
  // inside values) a restore; never a crash. An error leaves the session as it was.
  std::mt19937 rng(2);
  for (size_t cut = 0; cut < compact->bytes.size(); cut += compact->bytes.size() / 41 + 1) {
    SessionSnapshot s{std::vector<uint8_t>(compact->bytes.begin(), compact->bytes.begin() + cut)};
    EXPECT_FALSE((*b)->restore(s).ok()) << cut;
  }
  for (int i = 0; i < 120; ++i) {
    SessionSnapshot s = *compact;
    s.bytes[40 + rng() % (s.bytes.size() - 40)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (!(*b)->restore(s).ok()) {
      ASSERT_EQ((*b)->position(), 9);
      ASSERT_TRUE(std::equal(logits_before.begin(), logits_before.end(), (*b)->logits().begin()));
    } else {
      ASSERT_TRUE((*b)->restore(*compact).ok());  // fine again
      ASSERT_TRUE((*b)->rewind(0).ok());
      ASSERT_TRUE((*b)->eval(head).ok());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Numerics, CompactSnapshot, ::testing::Values(Numerics::official, Numerics::reference),
                         [](const auto& info) { return info.param == Numerics::official ? "official" : "reference"; });

}  // namespace
}  // namespace ds4::runtime
