// test_cuda_gemm.cpp — the int8 tensor-core prefill GEMM (ops_gemm.cu) bit for bit: the pipelined kernel
// (gemm2_kernel; 64-vector tiles up to 96 vectors and for grouped experts, 128-vector tiles above) equals
// the CPU op, the previous kernel (CudaBackendOptions::gemm_pipelined = false) and, for one token, the
// decode kernel at n = 1; routed experts grouped by expert with uneven expert counts (one expert with four
// tiles, experts with none) equal the previous kernel and stay within the CPU tolerance; the dense Q8_0
// kernel of gemm_q8.cu (CudaBackendOptions::gemm_q8, every launch shape, cp.async or bulk copies) equals the
// CPU op and the default, the bulk copies also on the Flash shapes at 2,048 tokens;
// the prefill glue (CudaBackendOptions::prefill_glue: activation quantizer, grouping, swiglu, slot sum)
// gives the same bits as the previous kernels; the grouped experts' kernels of gemm_experts.cu equal
// gemm2_kernel at the Flash depths.
// Not here: tolerance tests of every path (test_cuda_matmul.cpp), speed (cuda_prefill_bench).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "backend/cuda/cuda_impl.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"
#include "quant/quantize.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

struct Case {
  GgmlType t;
  int64_t rows, cols, n;
};

// Values of a and b whose bits differ (NaN counts as different).
int64_t bit_diffs(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

// Routed experts (CudaGemm::moe_case): run(be) is the MoE output [n][dim] on `be`, cpu(be) on the CPU.
struct MoeCase {
  int32_t ne = 0, dim = 0, ff = 0, k = 6;
  int64_t n = 0;
  std::vector<uint8_t> gb, ub, db;
  Weight g0, u0, d0;
  std::vector<int32_t> ids;
  std::vector<float> wts, x;
  MoeArgs a;

  std::vector<float> cpu(Backend& be) const {
    std::vector<float> out(static_cast<size_t>(n * dim));
    MoeArgs c = a;
    c.x = x.data();
    c.ids = ids.data();
    c.weights = wts.data();
    c.out = out.data();
    be.moe(c);
    return out;
  }

  std::vector<float> run(Backend& be) const {
    MoeArgs g = a;
    auto map = [&](ExpertWeights& e, const std::vector<uint8_t>& b) {
      auto p = be.map_weight(b.data(), b.size());
      EXPECT_TRUE(p.ok());
      e.first.data = *p;
    };
    map(g.gate, gb);
    map(g.up, ub);
    map(g.down, db);
    const uint64_t out_bytes = static_cast<uint64_t>(n * dim) * 4;
    auto bx = be.alloc(x.size() * 4, MemCategory::scratch), bi = be.alloc(ids.size() * 4, MemCategory::scratch);
    auto bw = be.alloc(wts.size() * 4, MemCategory::scratch), bo = be.alloc(out_bytes, MemCategory::scratch);
    EXPECT_TRUE(bx.ok() && bi.ok() && bw.ok() && bo.ok());
    be.upload(bx->data(), x.data(), x.size() * 4);
    be.upload(bi->data(), ids.data(), ids.size() * 4);
    be.upload(bw->data(), wts.data(), wts.size() * 4);
    g.x = bx->f32();
    g.ids = bi->i32();
    g.weights = bw->f32();
    g.out = bo->f32();
    be.fill_f32(g.out, NAN, n * dim);  // poisoned: every output must be written
    be.moe(g);
    std::vector<float> out(static_cast<size_t>(n * dim));
    be.download(out.data(), bo->data(), out_bytes);
    EXPECT_TRUE(be.sync().ok());
    return out;
  }
};

}  // namespace

class CudaGemm : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    cuda::CudaBackendOptions o;
    o.gemm_pipelined = false;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    old_ = std::move(made).value();
  }

  // y [n][w.rows] = w · x on backend `be`, from its own copies of the weight and of x [n][w.cols].
  std::vector<float> matmul_on(Backend& be, const Weight& w, uint64_t bytes, const float* x, int64_t n) {
    Weight gw = w;
    auto p = be.map_weight(w.data, bytes);
    EXPECT_TRUE(p.ok());
    gw.data = *p;
    auto gx = be.alloc(static_cast<uint64_t>(n * w.cols) * 4, MemCategory::scratch);
    auto gy = be.alloc(static_cast<uint64_t>(n * w.rows) * 4, MemCategory::scratch);
    EXPECT_TRUE(gx.ok() && gy.ok());
    std::vector<float> y(static_cast<size_t>(n * w.rows));
    be.upload(gx->data(), x, static_cast<uint64_t>(n * w.cols) * 4);
    be.fill_f32(gy->f32(), NAN, n * w.rows);
    be.matmul({gw, gx->f32(), w.cols, gy->f32(), w.rows, n, MatmulNumerics::ds4});
    be.download(y.data(), gy->data(), y.size() * 4);
    EXPECT_TRUE(be.sync().ok());
    return y;
  }

  // A random case on `be` against the CPU op (bits and tolerance) and against `other` (bits).
  void expect_bits(Backend& be, Backend& other, const Case& c, const std::string& label) {
    Weight w;
    auto bytes = random_weight(c.t, c.rows, c.cols, &w);
    w.data = bytes.data();
    const auto x = randn(static_cast<size_t>(c.n * c.cols));
    std::vector<float> want(static_cast<size_t>(c.n * c.rows));
    cpu_->matmul({w, x.data(), c.cols, want.data(), c.rows, c.n, MatmulNumerics::ds4});
    const auto got = matmul_on(be, w, bytes.size(), x.data(), c.n);
    const auto ref = matmul_on(other, w, bytes.size(), x.data(), c.n);
    const std::string what = label + " " + std::string(type_name(c.t)) + " " + std::to_string(c.rows) + "x" +
                             std::to_string(c.cols) + " n" + std::to_string(c.n);
    expect_close(got, want, 2e-5, 1e-7, what);
    EXPECT_EQ(bit_diffs(got, want), 0) << what << ": vs CPU";
    EXPECT_EQ(bit_diffs(got, ref), 0) << what << ": vs the other kernel";
  }

  // n tokens × 6 slots over ne experts (IQ2_XXS gate/up ff × dim, Q2_K down ff → dim): slot 0 is always
  // expert 0 (n pairs: several 64-pair tiles, the last partial), slots 1 … 5 spread over experts 1 … 15
  // by token, experts 16 … ne − 1 get no pair.
  MoeCase moe_case(int32_t ne, int32_t dim, int32_t ff, int64_t n) {
    MoeCase m;
    m.ne = ne;
    m.dim = dim;
    m.ff = ff;
    m.n = n;
    m.x = randn(static_cast<size_t>(n * dim));
    m.gb = random_weight(GgmlType::IQ2_XXS, int64_t{ne} * ff, dim, &m.g0);
    m.ub = random_weight(GgmlType::IQ2_XXS, int64_t{ne} * ff, dim, &m.u0);
    m.db = random_weight(GgmlType::Q2_K, int64_t{ne} * dim, ff, &m.d0);
    const int k = m.k;
    m.ids.resize(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n; ++i) {
      m.ids[i * k] = 0;
      for (int j = 1; j < k; ++j) m.ids[i * k + j] = static_cast<int32_t>(1 + (i % 3 + 3 * (j - 1)) % 15);
    }
    m.wts.resize(m.ids.size());
    for (auto& v : m.wts) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng_);
    auto experts = [&](Weight w, const std::vector<uint8_t>& data, int64_t rows) {
      return expert_stack(w, const_cast<uint8_t*>(data.data()), rows, ne);
    };
    m.a.gate = experts(m.g0, m.gb, ff);
    m.a.up = experts(m.u0, m.ub, ff);
    m.a.down = experts(m.d0, m.db, dim);
    m.a.n = n;
    m.a.k = k;
    m.a.dim = dim;
    m.a.ff = ff;
    m.a.clamp = 10.0f;
    return m;
  }

  std::unique_ptr<Backend> old_;
};

TEST_F(CudaGemm, PipelinedKernelIsBitIdenticalToCpuAndPreviousKernel) {
  // Partial row tiles (200, 300, 136 rows of 128), partial vector tiles (65 → 64-vector tiles, 1 left;
  // 130 → 128-vector tiles, 2 left), n = 4096, and the Flash column widths (which set the block order)
  // with rows capped to keep the CPU reference short. K-quants at 1024 columns: the Q8_K rows and the
  // IQ2_XXS rows sit at every 4-byte shift of their 16-byte copy windows; Q2_K at 512 columns: Q8_K
  // rows off 16 bytes, the previous kernel (gemm2_fits).
  const Case cases[] = {
      {GgmlType::Q8_0, 200, 512, 65},       {GgmlType::Q8_0, 200, 512, 130},     {GgmlType::Q8_0, 136, 1024, 4096},
      {GgmlType::Q8_0, 256, 4096, 300},     {GgmlType::Q8_0, 300, 1024, 200},    {GgmlType::Q8_0, 130, 8192, 150},
      {GgmlType::IQ2_XXS, 200, 1024, 65},   {GgmlType::IQ2_XXS, 200, 1024, 130}, {GgmlType::IQ2_XXS, 136, 1024, 4096},
      {GgmlType::IQ2_XXS, 200, 4096, 130},  {GgmlType::Q2_K, 200, 1024, 65},     {GgmlType::Q2_K, 200, 1024, 130},
      {GgmlType::Q2_K, 136, 1024, 4096},    {GgmlType::Q2_K, 200, 2048, 130},    {GgmlType::Q2_K, 100, 512, 70},
  };
  for (const Case& c : cases) expect_bits(*gpu_, *old_, c, "pipelined (other: previous kernel)");
}

TEST_F(CudaGemm, DirectQ8KernelsAreBitIdenticalToCpu) {
  // gemm_q8.cu, every launch shape (CudaBackendOptions::gemm_q8 1, 3 … 8: warps of 32 or 64 rows × 32 or 64
  // vectors, tiles of 128 or 256 rows × 64 or 128 vectors, rings of 2 or 3): partial row tiles (200, 300, 136), partial vector
  // tiles (65, 130, 150, 300), 1 … 32 stages (256 … 8192 columns: fewer stages than ring slots, and many
  // laps), equal to the CPU op and to the previous kernel bit for bit.
  const Case cases[] = {
      {GgmlType::Q8_0, 200, 512, 65},   {GgmlType::Q8_0, 200, 512, 130},  {GgmlType::Q8_0, 256, 4096, 300},
      {GgmlType::Q8_0, 300, 1024, 200}, {GgmlType::Q8_0, 130, 8192, 150}, {GgmlType::Q8_0, 136, 1024, 1000},
      {GgmlType::Q8_0, 128, 256, 128},
  };
  // 9 … 12: the stages by bulk copies (Cfg7, Cfg1, Cfg3, the shape by grid size); 13 … 15: by 2-D tensor
  // copies (Cfg7, Cfg1, the shape by grid size).
  // 17 … 22 (session 13): tensor copies with lean stores — 17: vector tiles first, 18: + the MMA from zero and its
  // sums converted, 19: converted sums, 21: lean stores only, 22: 18 on Cfg7.
  // 23, 28 (session 14): 18 with converted sums on Cfg1 / Cfg3 too (these small shapes take them); 28 with the GEMM
  // a programmatic dependent of its quantizer.
  for (int variant : {1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 28}) {
    cuda::CudaBackendOptions o;
    o.gemm_q8 = variant;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto q8 = std::move(made).value();
    const std::string label = "gemm_q8 " + std::to_string(variant) + " (other: previous kernel)";
    for (const Case& c : cases) expect_bits(*q8, *old_, c, label);
  }
}

static std::unique_ptr<Backend> backend_with(const cuda::CudaBackendOptions& o) {
  auto made = cuda::make_cuda_backend(o);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.ok() ? std::move(made).value() : nullptr;
}

TEST_F(CudaGemm, BulkCopyQ8KernelsEqualCpAsyncOnFlashShapes) {
  // gemm_q8.cu's bulk-copy and tensor-copy stages (CudaBackendOptions::gemm_q8 = 12, 15: the shape by grid
  // size, sm_90) on the
  // Flash Q8_0 shapes at a 2,048-token chunk (q_a / one out_a group 1024×4096 → Cfg1, q_b 32768×1024 and
  // out_b 4096×8192 → Cfg7, kv 512×4096 → Cfg3) and a partial vector tile (2,049; 77), bit for bit against
  // the cp.async ring (gemm_q8 = −1); the CPU op is compared on the small shapes above (its 2,048-token
  // products take minutes on the host).
  cuda::CudaBackendOptions o;
  o.gemm_q8 = 16;  // the cp.async ring by grid size (the reference here; gpu_'s default takes tensor copies)
  auto async = backend_with(o);
  ASSERT_TRUE(async);
  o.gemm_q8 = 12;
  auto bulk = backend_with(o);
  ASSERT_TRUE(bulk);
  o.gemm_q8 = 15;  // the same with 2-D tensor copies
  auto tensor = backend_with(o);
  ASSERT_TRUE(tensor);
  // session 13: 17 … 21 (vector tiles first; + converted sums; converted sums; lean stores); session 14: 23 … 25
  // (converted sums on every shape; + the GEMM a programmatic dependent of its quantizer)
  const int s13_variants[] = {17, 18, 19, 21, 23, 28};
  std::vector<std::unique_ptr<Backend>> s13;
  for (int v : s13_variants) {
    o.gemm_q8 = v;
    s13.push_back(backend_with(o));
    ASSERT_TRUE(s13.back());
  }
  struct Shape {
    int64_t rows, cols, n;
  };
  for (const Shape& sh : {Shape{1024, 4096, 2048}, Shape{32768, 1024, 2048}, Shape{4096, 8192, 2049},
                          Shape{512, 4096, 2048}, Shape{2048, 4096, 77}}) {
    Weight w;
    auto bytes = random_weight(GgmlType::Q8_0, sh.rows, sh.cols, &w);
    w.data = bytes.data();
    const auto x = randn(static_cast<size_t>(sh.n * sh.cols));
    const auto want = matmul_on(*async, w, bytes.size(), x.data(), sh.n);
    std::vector<std::pair<Backend*, std::string>> bes{{bulk.get(), ": bulk"}, {tensor.get(), ": tensor"}};
    for (size_t k = 0; k < s13.size(); ++k) bes.push_back({s13[k].get(), ": gemm_q8 " + std::to_string(s13_variants[k])});
    for (const auto& [be, label] : bes) {
      const auto got = matmul_on(*be, w, bytes.size(), x.data(), sh.n);
      const char* what = label.c_str();
      int64_t nan = 0;
      for (float v : got) nan += std::isnan(v);
      EXPECT_EQ(nan, 0) << sh.rows << "x" << sh.cols << " n=" << sh.n << what << ": outputs left unwritten";
      EXPECT_EQ(bit_diffs(got, want), 0) << sh.rows << "x" << sh.cols << " n=" << sh.n << what << " vs cp.async";
    }
  }
}

TEST_F(CudaGemm, Q8PartsLaunchIsBitIdenticalToOneLaunchPerPart) {
  // CudaBackendOptions::gemm_q8_parts: a grouped matmul (out_a's form: 4 groups of 136 rows — a partial
  // row tile — over consecutive 512-value ranges of x) and matmul_many's two Q8_0 jobs on one input (200
  // and 72 rows) in one quantization and one launch each, default shape (64 × 64 warps) and shape 4 (64 × 32):
  // the CPU op's bits and those of one launch per group / job.
  const int64_t G = 4, gr = 136, gc = 512, n = 200, cols = 1024;
  Weight wg;
  auto gbytes = random_weight(GgmlType::Q8_0, G * gr, gc, &wg);
  wg.data = gbytes.data();
  Weight wa, wb;
  auto abytes = random_weight(GgmlType::Q8_0, 200, cols, &wa);
  auto bbytes = random_weight(GgmlType::Q8_0, 72, cols, &wb);
  wa.data = abytes.data();
  wb.data = bbytes.data();
  const auto xg = randn(static_cast<size_t>(n * G * gc));
  const auto xm = randn(static_cast<size_t>(n * cols));
  // out = [grouped y (n × G·gr)] [job a (n × 200)] [job b (n × 72)] on backend `be`.
  auto run = [&](Backend& be) {
    auto map = [&](Weight w, const std::vector<uint8_t>& b) {
      auto p = be.map_weight(b.data(), b.size());
      EXPECT_TRUE(p.ok());
      w.data = *p;
      return w;
    };
    const Weight dg = map(wg, gbytes), da = map(wa, abytes), db = map(wb, bbytes);
    auto buf = [&](size_t floats) { return std::move(be.alloc(floats * 4, MemCategory::scratch)).value(); };
    Buffer bxg = buf(xg.size()), bxm = buf(xm.size()), by = buf(static_cast<size_t>(n * (G * gr + 200 + 72)));
    be.upload(bxg.data(), xg.data(), xg.size() * 4);
    be.upload(bxm.data(), xm.data(), xm.size() * 4);
    be.fill_f32(by.f32(), NAN, n * (G * gr + 200 + 72));
    MatmulArgs g{dg, bxg.f32(), G * gc, by.f32(), G * gr, n, MatmulNumerics::ds4};
    g.group_rows = gr;
    g.group_x_stride = gc;
    be.matmul(g);
    const MatmulArgs jobs[2] = {{da, bxm.f32(), cols, by.f32() + n * G * gr, 200, n, MatmulNumerics::ds4},
                                {db, bxm.f32(), cols, by.f32() + n * (G * gr + 200), 72, n, MatmulNumerics::ds4}};
    be.matmul_many(jobs);
    std::vector<float> out(static_cast<size_t>(n * (G * gr + 200 + 72)));
    be.download(out.data(), by.data(), out.size() * 4);
    EXPECT_TRUE(be.sync().ok());
    return out;
  };
  const auto want = run(*cpu_);
  cuda::CudaBackendOptions off;
  off.gemm_q8_parts = 0;
  auto solo_be = backend_with(off);
  ASSERT_TRUE(solo_be);
  const auto solo = run(*solo_be);
  EXPECT_EQ(bit_diffs(solo, want), 0) << "one launch per part vs CPU";
  // (−1: the default; 12, 15, 16: bulk copies, tensor copies, cp.async; 17, 19, 22: vector tiles first, converted
  // sums, Cfg7 with both)
  for (int variant : {-1, 4, 12, 15, 16, 17, 19, 22}) {
    cuda::CudaBackendOptions o;
    o.gemm_q8_parts = 1;
    o.gemm_q8 = variant;
    auto be = backend_with(o);
    ASSERT_TRUE(be);
    const auto got = run(*be);
    EXPECT_EQ(bit_diffs(got, want), 0) << "gemm_q8_parts, shape " << variant << ": vs CPU";
    EXPECT_EQ(bit_diffs(got, solo), 0) << "gemm_q8_parts, shape " << variant << ": vs one launch per part";
  }
}

TEST_F(CudaGemm, VectorFirstQ8TilesSkipShortPartsAndManyTiles) {
  // gemm_q8 = 22 (Cfg7's 256 × 128 tiles, vector tiles first, converted sums, lean stores): matmul_many's jobs of
  // 600 and 72 rows (the short part's row tiles 1 and 2 return at once) at 2,100 vectors (17 vector tiles, the
  // last partial), and one matrix of 4,096 × 512 at 4,100 vectors (16 × 33 tiles), bit for bit one cp.async
  // launch per job (gemm_q8_parts off, gemm_q8 = 16).
  const int64_t cols = 512, n = 2100, n2 = 4100;
  Weight wa, wb, wc;
  auto abytes = random_weight(GgmlType::Q8_0, 600, cols, &wa);
  auto bbytes = random_weight(GgmlType::Q8_0, 72, cols, &wb);
  auto cbytes = random_weight(GgmlType::Q8_0, 4096, cols, &wc);
  const auto x = randn(static_cast<size_t>(n2 * cols));
  auto run = [&](Backend& be) {
    auto map = [&](Weight w, const std::vector<uint8_t>& b) {
      auto p = be.map_weight(b.data(), b.size());
      EXPECT_TRUE(p.ok());
      w.data = *p;
      return w;
    };
    const Weight da = map(wa, abytes), db = map(wb, bbytes), dc = map(wc, cbytes);
    auto buf = [&](size_t floats) { return std::move(be.alloc(floats * 4, MemCategory::scratch)).value(); };
    const size_t ny = static_cast<size_t>(n * (600 + 72) + n2 * 4096);
    Buffer bx = buf(x.size()), by = buf(ny);
    be.upload(bx.data(), x.data(), x.size() * 4);
    be.fill_f32(by.f32(), NAN, static_cast<int64_t>(ny));
    const MatmulArgs jobs[2] = {{da, bx.f32(), cols, by.f32(), 600, n, MatmulNumerics::ds4},
                                {db, bx.f32(), cols, by.f32() + n * 600, 72, n, MatmulNumerics::ds4}};
    be.matmul_many(jobs);
    be.matmul({dc, bx.f32(), cols, by.f32() + n * 672, 4096, n2, MatmulNumerics::ds4});
    std::vector<float> out(ny);
    be.download(out.data(), by.data(), out.size() * 4);
    EXPECT_TRUE(be.sync().ok());
    return out;
  };
  cuda::CudaBackendOptions o;
  o.gemm_q8_parts = 0;
  o.gemm_q8 = 16;
  auto ref_be = backend_with(o);
  ASSERT_TRUE(ref_be);
  const auto want = run(*ref_be);
  o.gemm_q8_parts = 1;
  o.gemm_q8 = 22;
  auto be = backend_with(o);
  ASSERT_TRUE(be);
  const auto got = run(*be);
  int64_t nan = 0;
  for (float v : got) nan += std::isnan(v);
  EXPECT_EQ(nan, 0) << "outputs left unwritten";
  EXPECT_EQ(bit_diffs(got, want), 0) << "gemm_q8 22 vs one cp.async launch per job";
}

TEST_F(CudaGemm, TokenRowAtNOneEqualsItsRowInTheGemm) {
  // The decode kernel (n = 1) and the GEMM at n = 65 (64-vector tiles) and n = 130 (128-vector tiles)
  // give a token the same bits (Engine::step batches sessions and prefill chunks together).
  const Case cases[] = {{GgmlType::Q8_0, 200, 4096, 0}, {GgmlType::IQ2_XXS, 200, 4096, 0}, {GgmlType::Q2_K, 200, 2048, 0}};
  for (const Case& c : cases) {
    Weight w;
    auto bytes = random_weight(c.t, c.rows, c.cols, &w);
    w.data = bytes.data();
    const auto x = randn(static_cast<size_t>(130 * c.cols));
    const auto n65 = matmul_on(*gpu_, w, bytes.size(), x.data(), 65);
    const auto n130 = matmul_on(*gpu_, w, bytes.size(), x.data(), 130);
    for (int64_t v : {int64_t{0}, int64_t{64}, int64_t{129}}) {
      const auto one = matmul_on(*gpu_, w, bytes.size(), x.data() + v * c.cols, 1);
      for (int64_t o = 0; o < c.rows; ++o) {
        ASSERT_EQ(one[o], n130[v * c.rows + o]) << type_name(c.t) << " vector " << v << " row " << o << " (n 130)";
        if (v < 65) {
          ASSERT_EQ(one[o], n65[v * c.rows + o]) << type_name(c.t) << " vector " << v << " row " << o << " (n 65)";
        }
      }
    }
  }
}

TEST_F(CudaGemm, GroupedExpertsWithUnevenCountsMatchPreviousKernel) {
  // 200 tokens over 20 experts: expert 0 has four 64-pair tiles (the last of 8), experts 16 … 19 none.
  const MoeCase m = moe_case(20, 1024, 1024, 200);
  const auto want = m.cpu(*cpu_);
  const auto got = m.run(*gpu_);
  const auto prev = m.run(*old_);
  // The CPU bound of test_cuda_matmul.cpp's CudaMoe (hidden rows re-quantized to Q8_K).
  expect_close(got, want, 5e-4, 1e-7, "moe grouped iq2_xxs/q2_k uneven experts n200");
  EXPECT_EQ(bit_diffs(got, prev), 0) << "grouped experts: pipelined vs previous kernel";
}

TEST_F(CudaGemm, PrefillGlueIsBitIdenticalToPreviousKernels) {
  // CudaBackendOptions::prefill_glue on (default) and off: the grouping in one block (expert 0 with 8
  // tiles of 64 pairs, 15 partial ones, 24 experts without pairs), moe_swiglu / moe_sum 4-wide (512 tokens:
  // 3,072 pairs × 512 and 512 × 2,048 values, above their 2^20 threshold) and the Q8_0 activation
  // quantizer (dense matmuls of 65 … 2,048 vectors, and rows with zero and huge blocks) give the same bits.
  cuda::CudaBackendOptions off;
  off.prefill_glue = false;
  auto prev = backend_with(off);
  ASSERT_TRUE(prev);
  const MoeCase m = moe_case(40, 2048, 512, 512);
  const auto got = m.run(*gpu_), want = m.run(*prev);
  EXPECT_EQ(bit_diffs(got, want), 0) << "moe prefill glue vs previous kernels";
  for (const float v : got) ASSERT_TRUE(std::isfinite(v)) << "moe prefill glue: non-finite output";
  const Case cases[] = {{GgmlType::Q8_0, 200, 4096, 65}, {GgmlType::Q8_0, 136, 1024, 2048}, {GgmlType::Q8_0, 64, 8192, 300}};
  for (const Case& c : cases) expect_bits(*gpu_, *prev, c, "quantizer (other: previous quantizer)");
  // Zero blocks (d = 0) and blocks with values near the float range in a 100-vector batch.
  Weight w;
  auto bytes = random_weight(GgmlType::Q8_0, 96, 1024, &w);
  w.data = bytes.data();
  auto x = randn(100 * 1024);
  for (int i = 0; i < 64; ++i) x[5 * 1024 + i] = 0.0f;
  for (int i = 0; i < 32; ++i) x[7 * 1024 + 96 + i] = (i % 2 ? 1 : -1) * 1e20f;
  const auto a = matmul_on(*gpu_, w, bytes.size(), x.data(), 100);
  const auto b = matmul_on(*prev, w, bytes.size(), x.data(), 100);
  EXPECT_EQ(bit_diffs(a, b), 0) << "quantizer with zero and huge blocks";
}

TEST_F(CudaGemm, WarpSpecialisedExpertsAreBitIdenticalToGemm2) {
  // gemm_experts.cu's kernels (CudaBackendOptions::gemm_experts 13: weights decoded into MMA fragments by
  // each warp, blocks walking several (rows, tile) items, the fragment count fixed at compile time — 2, 4,
  // 6 or 8 by the tile's pairs; 20: experts_fast_kernel — counted copies, 32-bit copy offsets, the
  // IQ2_XXS grid in 16 copies, and the MoE op's SwiGLU folded into the down projection's quantizer) against
  // gemm2_kernel at the Flash depths: gate/up 4,096 columns (16 stages: the rings wrap several times),
  // down 2,048 (8 stages); 18 experts, 16 and 17 without pairs. 120 tokens: experts 1 … 15 hold 40 pairs
  // (5 of 8 n8 fragments), expert 0 tiles of 64 + 56; 140 tokens: expert 0 tiles of 64 + 64 + 12 (2
  // fragments). 400 tokens: expert 0 in 7 tiles, experts 1 … 15 in 3 (64 + 64 + 5): 52 tiles, ~3 (gate/up)
  // and ~6 (down) items per block of the walking variants (two blocks per SM), so their ring runs on
  // across items of different pair counts. 27 … 33: experts_fast_kernel with the lean stage (sub-block 0
  // peeled, Q2_K block sums from the int→float bias, its mins as one u8·s8 MMA, Q2_K's sub-blocks unrolled)
  // and items handed out by an atomic counter; 29: each item's stage loop specialised on its fragment count;
  // 30: 29 with gate and up in one launch on one quantization; 32: 29 with the lean copies (absent pairs and
  // rows zero-filled instead of skipped); 34: 32 with IQ2_XXS decoded by shared tables
  // (experts_iq2.cuh: selector words, PRMT); 44: 34 with gate and up on one quantization in one
  // launch, the tiles dearest first, 4-byte word loads where aligned, no copies of pair rows past the fragments;
  // 48: 44 with the IQ2_XXS table lookups by 32-bit shared addresses (the same words); 50 (the default): 48 with
  // the sub-block loop on stepped 32-bit addresses, raw prmt, the copy state in shared memory and the fragments of
  // ≤ 32-pair tiles formed one sub-block ahead.
  // 60, 80 and 160
  // tokens: experts 1 … 15 hold 20, ~27 and ~53 pairs, so every even-rounded fragment count (2, 4, 6, 8) runs.
  cuda::CudaBackendOptions off;
  off.gemm_experts = 0;
  auto gemm2 = backend_with(off);
  ASSERT_TRUE(gemm2);
  std::vector<std::unique_ptr<Backend>> variants;
  constexpr int kVariants[] = {13, 20, 27, 29, 30, 32, 34, 44, 48, 50};
  for (int v : kVariants) {
    cuda::CudaBackendOptions o;
    o.gemm_experts = v;
    variants.push_back(backend_with(o));
    ASSERT_TRUE(variants.back());
  }
  for (const int64_t n : {int64_t{60}, int64_t{80}, int64_t{120}, int64_t{140}, int64_t{160}, int64_t{400}}) {
    const MoeCase m = moe_case(18, 4096, 2048, n);
    const auto want = m.run(*gemm2);
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto got = m.run(*variants[v]);
      EXPECT_EQ(bit_diffs(got, want), 0) << "gemm_experts " << kVariants[v] << " vs gemm2_kernel, n " << n;
      for (const float x : got) ASSERT_TRUE(std::isfinite(x)) << "gemm_experts " << kVariants[v] << ": non-finite, n " << n;
    }
  }
}

TEST_F(CudaGemm, ExpertsByCostMatchAtSkewedRouting) {
  // gemm_experts 44 (gate and up on one quantization in one launch, tiles ordered dearest first by
  // group_tiles_kernel, 4-byte word loads where aligned, no copies past the fragments) against 34 and
  // gemm2_kernel at the Flash widths (gate/up 4,096, down 2,048 columns) with routing like a text prompt's:
  // 1,024 tokens of Zipf-distributed types over 300, each type with its own 6 of 64 experts drawn with a
  // popularity skew — tiles of every class (full, 49 … 64, 33 … 48, 17 … 32, 1 … 16 pairs) and several tiles
  // for the popular experts; ~24 items per block. Outputs poisoned (MoeCase::run).
  cuda::CudaBackendOptions o0, o34;
  o0.gemm_experts = 0;
  o34.gemm_experts = 34;
  auto gemm2 = backend_with(o0), b34 = backend_with(o34);
  ASSERT_TRUE(gemm2 && b34);
  MoeCase m = moe_case(64, 4096, 2048, 1024);
  constexpr int kTypes = 300;
  std::vector<double> type_w(kTypes), expert_w(64);
  for (int t = 0; t < kTypes; ++t) type_w[t] = 1.0 / (t + 1);
  for (int e = 0; e < 64; ++e) expert_w[e] = 1.0 / (1.0 + e / 4.0);
  std::discrete_distribution<int> type_of(type_w.begin(), type_w.end());
  std::vector<std::array<int32_t, 6>> experts_of(kTypes);
  for (auto& ex : experts_of) {
    std::vector<double> w = expert_w;
    for (int j = 0; j < 6; ++j) {
      const int e = std::discrete_distribution<int>(w.begin(), w.end())(rng_);
      ex[j] = e;
      w[e] = 0;  // distinct experts per token
    }
  }
  for (int64_t i = 0; i < m.n; ++i) {
    const auto& ex = experts_of[type_of(rng_)];
    for (int j = 0; j < m.k; ++j) m.ids[i * m.k + j] = ex[j];
  }
  const auto want = m.run(*gemm2), got34 = m.run(*b34);
  EXPECT_EQ(bit_diffs(got34, want), 0) << "gemm_experts 34 vs gemm2_kernel, skewed routing";
  for (int v : {44, 48, 50}) {
    cuda::CudaBackendOptions o;
    o.gemm_experts = v;
    auto be = backend_with(o);
    ASSERT_TRUE(be);
    const auto got = m.run(*be);
    EXPECT_EQ(bit_diffs(got, want), 0) << "gemm_experts " << v << " vs gemm2_kernel, skewed routing";
    for (const float x : got) ASSERT_TRUE(std::isfinite(x)) << "gemm_experts " << v << ": non-finite, skewed routing";
  }
}

TEST_F(CudaGemm, RemovedExpertsVariantsAreRejected) {
  // Variants removed after the H200 runs (35 … 39 in session 11, 40 … 43 and 45 in session 12, 46 and 47 never
  // landed in session 13, 49 and 51 in session 14) and values never made: make_cuda_backend refuses them instead of running the default
  // under their name; the kept variants and -1 (the default) are accepted.
  for (int v : {1, 35, 36, 37, 38, 39, 40, 42, 43, 45, 46, 47, 49, 51, 99}) {
    cuda::CudaBackendOptions o;
    o.gemm_experts = v;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_FALSE(made.ok()) << v;
    EXPECT_NE(made.status().to_string().find("gemm_experts"), std::string::npos) << made.status().to_string();
  }
  for (int v : {-1, 0, 13, 20, 34, 44, 48, 50}) {
    cuda::CudaBackendOptions o;
    o.gemm_experts = v;
    EXPECT_TRUE(cuda::make_cuda_backend(o).ok()) << v;
  }
}

TEST_F(CudaGemm, PrefillQ8QuantizersEqualCpuBytes) {
  // The prefill Q8_0 activation quantizer (CudaBackend::quantize_act with prefill_glue: ops_matmul.cu's
  // quantize_q8_0_rows_kernel; gemm_q8 = 28: its form that lets a programmatic dependent start) gives the CPU's
  // quantize_act_q8_0 bytes — rows of zeros, NaN (one, all), ±inf, huge,
  // subnormal and half-way values, the largest |x| negative; strides wider than the row; partial last rounds; the
  // Flash widths at 2,048 rows (q_a / kv / gate+up 4,096, q_b 1,024, out_a 32,768 over 64 rows, out_b 8,192, down
  // 2,048); bytes past the rows untouched (poisoned).
  struct Shape {
    int64_t rows, cols, x_stride;
  };
  const Shape shapes[] = {{1, 32, 32},      {3, 64, 68},       {5, 96, 96},        {77, 1024, 1024}, {130, 8192, 8200},
                          {2048, 4096, 4096}, {2048, 1024, 1024}, {64, 32768, 32768}, {2048, 8192, 8192}, {2048, 2048, 2048},
                          {2049, 256, 256}};
  for (int variant : {18, 28}) {
    cuda::CudaBackendOptions o;
    o.gemm_q8 = variant;
    auto be = backend_with(o);
    ASSERT_TRUE(be);
    auto& cb = static_cast<cuda::CudaBackend&>(*be);
    for (const Shape& sh : shapes) {
      auto x = randn(static_cast<size_t>(sh.rows * sh.x_stride));
      // Special blocks in the first rows (block k of row 0 … 2): zeros, one NaN, all NaN, ±inf, huge, subnormal,
      // half-way values (amax 127 → d = 1: v · id = k + 0.5 exactly), a negative largest |x|.
      const int64_t nb = sh.cols / 32;
      for (int64_t k = 0; k < std::min<int64_t>(nb * std::min<int64_t>(sh.rows, 3), 9); ++k) {
        float* b = x.data() + (k / nb) * sh.x_stride + (k % nb) * 32;
        for (int i = 0; i < 32; ++i) {
          switch (k) {
            case 0: b[i] = 0.0f; break;
            case 1: if (i == 5) b[i] = NAN; break;
            case 2: b[i] = NAN; break;
            case 3: if (i == 7 || i == 8) b[i] = i == 7 ? INFINITY : -INFINITY; break;
            case 4: b[i] = 3e38f * (i % 2 ? 1.0f : -0.5f); break;
            case 5: b[i] = 1e-40f * static_cast<float>(i - 16); break;
            case 6: b[i] = i == 0 ? 127.0f : static_cast<float>(i % 20) - 9.5f; break;
            case 7: b[i] = i == 31 ? -50.0f : static_cast<float>(i) * 0.25f; break;
            default: b[i] = i == 3 ? -1e-3f : 1e-3f; break;
          }
        }
      }
      const uint64_t row_bytes = static_cast<uint64_t>(nb) * sizeof(BlockQ8_0Act);
      std::vector<uint8_t> want(row_bytes * sh.rows);
      for (int64_t r = 0; r < sh.rows; ++r)
        quantize_act_q8_0(x.data() + r * sh.x_stride, reinterpret_cast<BlockQ8_0Act*>(want.data() + r * row_bytes), sh.cols);
      auto gx = be->alloc(x.size() * 4, MemCategory::scratch);
      ASSERT_TRUE(gx.ok());
      be->upload(gx->data(), x.data(), x.size() * 4);
      cuda::DeviceScratch out;
      const uint64_t poison_bytes = row_bytes * sh.rows + 64;
      ASSERT_TRUE(cb.ensure(out, poison_bytes, "test"));
      // (on the backend's stream: a legacy-stream memset may land after the quantizer — H200 W2, under load)
      ASSERT_EQ(cudaMemsetAsync(out.ptr, 0xA5, poison_bytes, cb.stream()), cudaSuccess);
      const uint64_t stride = cb.quantize_act(GgmlType::Q8_0, gx->f32(), sh.x_stride, sh.rows, sh.cols, out);
      ASSERT_EQ(stride, row_bytes);
      std::vector<uint8_t> got(poison_bytes);
      be->download(got.data(), out.ptr, got.size());
      ASSERT_TRUE(be->sync().ok());
      int64_t diff = 0, touched = 0;
      for (uint64_t i = 0; i < want.size(); ++i) diff += got[i] != want[i];
      for (uint64_t i = want.size(); i < got.size(); ++i) touched += got[i] != 0xA5;
      const std::string what = "gemm_q8 " + std::to_string(variant) + " quantizer " + std::to_string(sh.rows) + "x" +
                               std::to_string(sh.cols) + " stride " + std::to_string(sh.x_stride);
      EXPECT_EQ(diff, 0) << what << ": bytes differing from the CPU's";
      EXPECT_EQ(touched, 0) << what << ": bytes written past the rows";
      std::printf("PARITY %s %s: %lld of %zu bytes differ\n", diff == 0 && touched == 0 ? "ok  " : "FAIL", what.c_str(),
                  static_cast<long long>(diff), want.size());
      cudaFree(out.ptr);
    }
  }
}

TEST_F(CudaGemm, RemovedQ8VariantsAreRejected) {
  // gemm_q8's twin of RemovedExpertsVariantsAreRejected: values launch_parts does not name — removed (2 before
  // session 9's W2, 20 in session 13, 24 … 27 and 29 in session 14) or never made — are refused by make_cuda_backend instead of running the
  // default under their name; every kept value and −1 (the default) are accepted.
  for (int v : {-2, 2, 20, 24, 25, 26, 27, 29, 30, 99}) {
    cuda::CudaBackendOptions o;
    o.gemm_q8 = v;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_FALSE(made.ok()) << v;
    EXPECT_NE(made.status().to_string().find("gemm_q8"), std::string::npos) << made.status().to_string();
  }
  for (int v : {-1, 0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23, 28}) {
    cuda::CudaBackendOptions o;
    o.gemm_q8 = v;
    EXPECT_TRUE(cuda::make_cuda_backend(o).ok()) << v;
  }
}
