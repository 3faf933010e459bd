// test_cuda_moe_rows.cpp — the routed-expert row tiles' balanced runs (CudaBackendOptions::expert_row_tiles_v3,
// moe_row_tiles.cu balanced_run) against the CPU moe op bit for bit: with many experts (CudaMoeRows: 600 experts
// at small widths, E 512, F 256: IQ2_XXS gate/up rows of 2 blocks = one slab, Q2_K down rows of 1 block), so a
// batch routes to more than 256 distinct experts and the runs' search walks past the 8 chunks of 32 groups it
// holds in registers; and at the Flash widths (CudaMoeRowsFlash: 32 experts, E 4096, F 2048). Every variant
// (balanced runs with the byte-permute and with the fast IQ2_XXS decode, the runs before) with distinct
// routing, all tokens on the same experts (one group of many pairs: its passes), k 6 and 8, and a bad id (NaN
// for its token only). test_cuda_moe_tiles.cpp holds the other expert kernels' checks.
#include <algorithm>
#include <cstring>

#include "cuda_test_util.h"
#include "moe_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

// Experts and widths of one fixture.
struct Shape {
  int32_t ne;
  int64_t dim, ff;
};

class RowsTest : public CudaOpsTest {
 protected:
  explicit RowsTest(Shape s) : ne_(s.ne), dim_(s.dim), ff_(s.ff) {}

  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    auto make = [](bool v3, bool perm, std::unique_ptr<Backend>& to) {
      cuda::CudaBackendOptions o;
      o.expert_row_tiles_min = 1;
      o.expert_row_tiles_v3 = v3 ? 1 : 0;
      o.expert_row_tiles_perm = perm;
      auto p = cuda::make_cuda_backend(o);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      to = std::move(p).value();
    };
    make(true, true, sides_[0]);
    make(true, false, sides_[1]);
    make(false, true, sides_[2]);
    if (HasFatalFailure()) return;
    gb_ = random_weight(GgmlType::IQ2_XXS, int64_t{ne_} * ff_, dim_, &g0_);
    ub_ = random_weight(GgmlType::IQ2_XXS, int64_t{ne_} * ff_, dim_, &u0_);
    db_ = random_weight(GgmlType::Q2_K, int64_t{ne_} * dim_, ff_, &d0_);
    cpu_args_.gate = experts(g0_, gb_.data(), ff_);
    cpu_args_.up = experts(u0_, ub_.data(), ff_);
    cpu_args_.down = experts(d0_, db_.data(), dim_);
    for (int b = 0; b < kSides; ++b) {
      auto up = [&](ExpertWeights e, const std::vector<uint8_t>& bytes) {
        auto d = sides_[b]->map_weight(bytes.data(), bytes.size());
        EXPECT_TRUE(d.ok());
        e.first.data = d.ok() ? *d : nullptr;
        return e;
      };
      side_args_[b].gate = up(cpu_args_.gate, gb_);
      side_args_[b].up = up(cpu_args_.up, ub_);
      side_args_[b].down = up(cpu_args_.down, db_);
    }
  }

  // 0: balanced runs, byte-permute decode; 1: balanced runs, fast decode; 2: the runs before (the default:
  // byte-permute decode up to 16 tokens).
  static constexpr int kSides = 3;
  static constexpr const char* kNames[kSides] = {"v3 perm", "v3 fast", "v2"};

  ExpertWeights experts(Weight w, void* data, int64_t rows) const {
    return expert_stack(w, data, rows, ne_);
  }

  std::vector<int32_t> routing(int64_t n, int32_t k, bool same) {
    return random_routing(rng_, ne_, n, k, same);
  }

  std::vector<float> run_gpu(int b, const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    Backend& be = *sides_[b];
    auto put = [&](const void* h, uint64_t bytes) {
      auto buf = be.alloc(bytes + 16, MemCategory::scratch);
      EXPECT_TRUE(buf.ok());
      be.upload(buf->data(), h, bytes);
      void* p = buf->data();
      bufs_[b].push_back(std::move(buf).value());
      return p;
    };
    auto out = be.alloc(static_cast<uint64_t>(n * dim_) * 4, MemCategory::scratch);
    EXPECT_TRUE(out.ok());
    be.fill_f32(out->f32(), NAN, n * dim_);
    const auto* dx = static_cast<const float*>(put(x.data(), x.size() * 4));
    const auto* dids = static_cast<const int32_t*>(put(ids.data(), ids.size() * 4));
    const auto* dwts = static_cast<const float*>(put(wts.data(), wts.size() * 4));
    be.moe(moe_call(side_args_[b], dx, dids, dwts, n, k, dim_, ff_, 0.5f, out->f32()));
    EXPECT_TRUE(be.sync().ok());
    std::vector<float> h(static_cast<size_t>(n * dim_));
    be.download(h.data(), out->data(), h.size() * 4);
    bufs_[b].push_back(std::move(out).value());
    return h;
  }

  std::vector<float> run_cpu(const std::vector<float>& x, const std::vector<int32_t>& ids,
                             const std::vector<float>& wts, int64_t n, int32_t k) {
    std::vector<float> out(static_cast<size_t>(n * dim_));
    cpu_->moe(moe_call(cpu_args_, x.data(), ids.data(), wts.data(), n, k, dim_, ff_, 0.5f, out.data()));
    return out;
  }

  // Every side equals the CPU bit for bit; a bad id's token is NaN on the GPU (the CPU op leaves that slot's
  // row as whatever its scratch held, so its token is not compared).
  void check(int64_t n, int32_t k, bool same, int64_t bad = -1) {
    const auto x = randn(static_cast<size_t>(n * dim_));
    auto ids = routing(n, k, same);
    if (bad >= 0) ids[bad * k + 1] = ne_ + 3;
    std::vector<int32_t> used;
    for (int32_t id : ids)
      if (id < ne_) used.push_back(id);
    std::sort(used.begin(), used.end());
    const auto distinct = std::unique(used.begin(), used.end()) - used.begin();
    std::vector<float> wts(ids.size());
    for (auto& v : wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    const auto want = run_cpu(x, ids, wts, n, k);
    const std::string what = "moe rows " + std::to_string(ne_) + "x" + std::to_string(dim_) + " k" + std::to_string(k) + " n" +
                             std::to_string(n) + (same ? " same experts" : " random") + (bad >= 0 ? " bad id" : "");
    for (int b = 0; b < kSides; ++b) {
      const auto got = run_gpu(b, x, ids, wts, n, k);
      bool same_bits = got.size() == want.size();
      for (size_t i = 0; same_bits && i < got.size(); ++i) {
        if (static_cast<int64_t>(i) / dim_ == bad) same_bits = std::isnan(got[i]);
        else same_bits = std::memcmp(&got[i], &want[i], 4) == 0;
      }
      EXPECT_TRUE(same_bits) << what << ": " << kNames[b] << " not the CPU's bits";
      std::printf("PARITY %-44s n=%-7zu (%3ld experts) %s row tiles == CPU bit for bit: %s\n", what.c_str(),
                  got.size(), static_cast<long>(distinct), kNames[b], same_bits ? "ok" : "FAIL");
    }
  }

  const int32_t ne_;
  const int64_t dim_, ff_;
  std::unique_ptr<Backend> sides_[kSides];
  std::vector<Buffer> bufs_[kSides];  // declared after the backends: destroyed first
  std::vector<uint8_t> gb_, ub_, db_;
  Weight g0_, u0_, d0_;
  MoeArgs cpu_args_, side_args_[kSides];
};

class CudaMoeRows : public RowsTest {
 protected:
  CudaMoeRows() : RowsTest({600, 512, 256}) {}
};

class CudaMoeRowsFlash : public RowsTest {
 protected:
  CudaMoeRowsFlash() : RowsTest({32, 4096, 2048}) {}
};

TEST_F(CudaMoeRows, ManyExpertsRandomRouting) {
  for (int64_t n : {1, 8, 33, 64}) check(n, 8, false);  // n = 64: 512 pairs on ~350 experts (11 chunks)
  check(40, 6, false);
}

TEST_F(CudaMoeRows, ManyExpertsSameRouting) {
  for (int64_t n : {9, 64}) check(n, 6, true);  // 6 groups of n pairs: several passes each
}

TEST_F(CudaMoeRows, ManyExpertsBadId) { check(50, 8, false, 17); }

TEST_F(CudaMoeRowsFlash, RandomRouting) {
  for (int64_t n : {8, 33, 64}) check(n, 6, false);
  check(33, 8, false);
}

TEST_F(CudaMoeRowsFlash, AllTokensOnTheSameExperts) { check(64, 6, true); }

TEST_F(CudaMoeRowsFlash, BadId) { check(20, 6, false, 7); }

}  // namespace
