// test_cuda_small6.cpp — session 9's decode launches (the decode-sized RoPE and a CSA layer's paired
// compressor walk as programmatic dependents: ops_norm_rope.cu kRopePdl, ops_compressor.cu kRing2Pdl) bit for
// bit against plain launches (CudaBackendOptions::hc_pdl = false) on the same inputs, at decode batch sizes
// n = 1, 2, 8, 32. Each op runs right behind a programmatic-dependent kernel that writes its input (scale by 2
// of a halved copy: exact), so an op that read before its wait would see the halved values. The plain
// launches are checked against the CPU in test_cuda_ops.cpp / test_cuda_batch_ops.cpp, so equal bits carry
// that over. And Backend::compressors_and_qat's one launch (CudaBackendOptions::small_v6) bit for bit the two
// ops it stands for. Deliberately not here: speed (cuda_bench --small6).
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaSmall6 : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    cuda::CudaBackendOptions on, off;
    off.hc_pdl = false;
    auto a = cuda::make_cuda_backend(on);
    auto b = cuda::make_cuda_backend(off);
    ASSERT_TRUE(a.ok() && b.ok());
    pdl_ = std::move(a).value();
    plain_ = std::move(b).value();
  }
  // Halves of `h` on the device: the op's input once `scale` (a programmatic dependent itself) doubles it.
  float* halved(const std::vector<float>& h) {
    std::vector<float> half(h.size());
    for (size_t i = 0; i < h.size(); ++i) half[i] = h[i] * 0.5f;
    return dev(half);
  }
  // A CSA layer's two compressors (D512 ratio 4 with overlap, and the indexer's D128) over n sessions of one token
  // at pos0[k] (one session: the single walking call; more: the batched step's segments), the same inputs on two
  // copies [0] and [1]; each copy's kv projections halved (scale by 2 makes them whole).
  struct CompressorPair {
    static constexpr int32_t kRatio = 4, kSlots = 16, kD[2] = {512, 128};
    int64_t n = 0;
    std::vector<int32_t> pos0;
    std::vector<float> kv[2];                // job j's projections [n][2·D]
    CompressorArgs a[2][2];                  // [copy][job]
    float* kv_dev[2][2];                     // [copy][job]
    std::vector<float*> out[2][2], skv[2][2], ssc[2][2];
    std::vector<int32_t*> pos[2][2];
  };
  CompressorPair compressor_pair(std::vector<int32_t> pos0) {
    CompressorPair p;
    p.n = static_cast<int64_t>(pos0.size());
    p.pos0 = std::move(pos0);
    const int64_t n = p.n;
    for (int j = 0; j < 2; ++j) {
      const int64_t width = 2 * CompressorPair::kD[j];
      p.kv[j] = randn(static_cast<size_t>(n * width));
      const auto sc = randn(static_cast<size_t>(n * width));
      const auto ape = randn(static_cast<size_t>(CompressorPair::kRatio * width));
      std::vector<std::vector<float>> skv, ssc;
      for (int64_t k = 0; k < n; ++k) {
        skv.push_back(randn(static_cast<size_t>(CompressorPair::kSlots * width)));
        ssc.push_back(randn(static_cast<size_t>(CompressorPair::kSlots * width)));
      }
      for (int c = 0; c < 2; ++c) {
        CompressorArgs& a = p.a[c][j];
        p.kv_dev[c][j] = halved(p.kv[j]);
        a.kv = p.kv_dev[c][j];
        a.score = dev(sc);
        a.ape = dev(ape);
        a.ratio = CompressorPair::kRatio;
        a.out_dim = CompressorPair::kD[j];
        a.overlap = true;
        a.slots = CompressorPair::kSlots;
        std::vector<CompressorSegment> seg;
        for (int64_t k = 0; k < n; ++k) {
          p.out[c][j].push_back(poisoned(static_cast<size_t>(CompressorPair::kD[j])));
          p.pos[c][j].push_back(poisoned_i32(1));
          p.skv[c][j].push_back(dev(skv[k]));
          p.ssc[c][j].push_back(dev(ssc[k]));
          seg.push_back({k, 1, p.pos0[k], p.skv[c][j][k], p.ssc[c][j][k], p.out[c][j][k], p.pos[c][j][k]});
        }
        if (n > 1) {
          a.segments = static_cast<int32_t>(n);
          a.seg = dev(seg);
        } else {
          a.n = 1;
          a.pos0 = p.pos0[0];
          a.state_kv = seg[0].state_kv;
          a.state_score = seg[0].state_score;
          a.out = seg[0].out;
          a.out_pos = seg[0].out_pos;
        }
      }
    }
    return p;
  }
  // Copy c's kv doubled on backend be (the programmatic dependent the compressors follow).
  void double_kv(Backend& be, const CompressorPair& p, int c) {
    for (int j = 0; j < 2; ++j) be.scale(p.kv_dev[c][j], 2.0f, p.n * 2 * CompressorPair::kD[j]);
  }
  // Pooled rows (NaN poison where nothing pooled), positions and both rings that differ between the copies, and
  // rings of copy 0 whose token row is not the whole kv (a read before the wait saw the halved copy).
  int pair_mismatches(const CompressorPair& p) {
    int bad = 0;
    for (int j = 0; j < 2; ++j)
      for (int64_t k = 0; k < p.n; ++k) {
        const int64_t D = CompressorPair::kD[j], width = 2 * D;
        const size_t ring = static_cast<size_t>(CompressorPair::kSlots * width);
        const auto oa = host(p.out[0][j][k], static_cast<size_t>(D)), ob = host(p.out[1][j][k], static_cast<size_t>(D));
        bad += std::memcmp(oa.data(), ob.data(), oa.size() * 4) != 0 ? 1 : 0;
        bad += host(p.pos[0][j][k], 1) != host(p.pos[1][j][k], 1) ? 1 : 0;
        const auto ka = host(p.skv[0][j][k], ring), kb = host(p.skv[1][j][k], ring);
        const auto sa = host(p.ssc[0][j][k], ring), sb = host(p.ssc[1][j][k], ring);
        bad += std::memcmp(ka.data(), kb.data(), ka.size() * 4) != 0 ? 1 : 0;
        bad += std::memcmp(sa.data(), sb.data(), sa.size() * 4) != 0 ? 1 : 0;
        const int64_t row = p.pos0[k] % CompressorPair::kSlots;
        bad += std::memcmp(ka.data() + row * width, p.kv[j].data() + k * width, static_cast<size_t>(width) * 4) != 0 ? 1 : 0;
      }
    return bad;
  }
  std::unique_ptr<Backend> pdl_, plain_;  // PDL launches, plain launches (on this test's device buffers)
};

void expect_v6_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  expect_same_bits(got, want, what, "PDL == plain launches");
}

}  // namespace

// The attention output's inverse RoPE (64 heads of 512, 64 RoPE dims) and a forward one, the indexer query's
// shape (64 × 128), and an odd one (3 heads of 32, rotated whole), behind the scale that writes them.
TEST_F(CudaSmall6, DecodeRopeEqualsPlain) {
  struct S {
    int32_t heads, dim, n_rot;
    bool inverse;
  };
  for (S s : {S{64, 512, 64, true}, S{64, 512, 64, false}, S{64, 128, 64, false}, S{3, 32, 32, true}})
    for (int64_t n : {1, 2, 8, 32}) {
      const std::string tag = "rope H" + std::to_string(s.heads) + " D" + std::to_string(s.dim) + " R" +
                              std::to_string(s.n_rot) + (s.inverse ? " inverse" : "") + " n" + std::to_string(n);
      const auto x = randn(static_cast<size_t>(n * s.heads * s.dim), 2.0f);
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) pos[t] = randint(0, 1 << 20);
      std::vector<double> freq(static_cast<size_t>(s.n_rot / 2));
      for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / s.n_rot);
      float *xa = halved(x), *xb = halved(x);
      const int32_t* p = dev(pos);
      ASSERT_TRUE(gpu_->sync().ok());  // the uploads (on this backend's stream) before the others run
      for (auto [be, xp] : {std::pair{pdl_.get(), xa}, std::pair{plain_.get(), xb}}) {
        be->scale(xp, 2.0f, static_cast<int64_t>(x.size()));
        be->rope({xp, p, n, s.heads, s.dim, s.n_rot, freq.data(), s.inverse});
        ASSERT_TRUE(be->sync().ok()) << tag;
      }
      expect_v6_bits(host(xa, x.size()), host(xb, x.size()), tag);
    }
}

// A CSA layer's two compressors in one call (compressor_many) behind the scale that writes their kv projections:
// one session of 1 token (a block closing and not), and n sessions of one token each (the batched step's
// segments, half of them closing a block with `closing`). Pooled rows, positions and both rings.
TEST_F(CudaSmall6, DecodeCompressorsEqualPlain) {
  for (int64_t n : {1, 2, 8, 32})
    for (bool closing : {false, true}) {
      const std::string tag = std::string("compressors D512 + D128 r4 n") + std::to_string(n) + (closing ? " closing" : "");
      const int32_t r = CompressorPair::kRatio;
      std::vector<int32_t> pos0(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) pos0[k] = r * randint(2, 500) + (closing && k % 2 == 0 ? r - 1 : randint(0, r - 2));
      const CompressorPair p = compressor_pair(pos0);
      ASSERT_TRUE(gpu_->sync().ok());
      Backend* bes[2] = {pdl_.get(), plain_.get()};
      for (int c = 0; c < 2; ++c) {
        double_kv(*bes[c], p, c);
        bes[c]->compressor_many(p.a[c]);
        ASSERT_TRUE(bes[c]->sync().ok()) << tag;
      }
      const int bad = pair_mismatches(p);
      EXPECT_EQ(bad, 0) << tag;
      std::printf("PARITY %-44s rows, positions, rings bit for bit: %s\n", tag.c_str(), bad ? "FAIL" : "ok");
    }
}

// Backend::compressors_and_qat (one launch with small_v6) bit for bit compressor_many, then indexer_qat (small_v6
// = 0): the CSA layer's compressors as above and the indexer query's RoPE + QAT (64 heads of 128, 64 RoPE
// dims, the head weights' scale; and 2 × 64 with 16 dims, no scale, where a block holds 8 rows, some idle). Calls
// past compressors_qat.cu's kMaxFusedRows (64 heads from n = 2) take the two ops there too: the same bits either way.
TEST_F(CudaSmall6, CompressorsAndQatEqualTheTwoOps) {
  cuda::CudaBackendOptions on, off;
  on.small_v6 = 1;
  off.small_v6 = 0;
  auto made_on = cuda::make_cuda_backend(on);
  auto made_off = cuda::make_cuda_backend(off);
  ASSERT_TRUE(made_on.ok() && made_off.ok());
  for (int64_t n : {1, 2, 8, 32})
    for (int shape = 0; shape < 2; ++shape) {
      const int32_t heads = shape == 0 ? 64 : 2, dim = shape == 0 ? 128 : 64, n_rot = shape == 0 ? 64 : 16;
      const std::string tag = "compressors + rope qat H" + std::to_string(heads) + " D" + std::to_string(dim) + " n" +
                              std::to_string(n);
      const int32_t r = CompressorPair::kRatio;
      std::vector<int32_t> pos0(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) pos0[k] = r * randint(2, 500) + randint(0, r - 1);
      const CompressorPair p = compressor_pair(pos0);
      const int64_t rows = n * heads;
      const auto x = randn(static_cast<size_t>(rows * dim), 2.0f);
      const auto wts = randn(static_cast<size_t>(rows), 3.0f);
      std::vector<double> freq(static_cast<size_t>(n_rot / 2));
      for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot);
      const int32_t* gpos = dev(pos0);
      IndexerQatArgs q[2];
      for (int c = 0; c < 2; ++c) {
        q[c] = IndexerQatArgs{halved(x), rows, dim, true};
        q[c].pos = gpos;
        q[c].heads = heads;
        q[c].n_rot = n_rot;
        q[c].freq = freq.data();
        if (shape == 0) {
          q[c].scale_x = dev(wts);
          q[c].scale = 0.0110485f;
          q[c].scale_count = rows;
        }
      }
      ASSERT_TRUE(gpu_->sync().ok());
      Backend* bes[2] = {made_on->get(), made_off->get()};
      for (int c = 0; c < 2; ++c) {
        double_kv(*bes[c], p, c);
        bes[c]->scale(q[c].x, 2.0f, rows * dim);
        if (c == 0) {
          bes[c]->compressors_and_qat(p.a[c], q[c]);
        } else {
          bes[c]->compressor_many(p.a[c]);
          bes[c]->indexer_qat(q[c]);
        }
        ASSERT_TRUE(bes[c]->sync().ok()) << tag;
      }
      const int bad = pair_mismatches(p);
      EXPECT_EQ(bad, 0) << tag;
      expect_v6_bits(host(q[0].x, x.size()), host(q[1].x, x.size()), tag + " query rows");
      if (shape == 0) expect_v6_bits(host(q[0].scale_x, wts.size()), host(q[1].scale_x, wts.size()), tag + " weights scale");
      std::printf("PARITY %-44s rows, positions, rings, query, weights: %s\n", tag.c_str(), bad ? "FAIL" : "ok");
    }
}
