// test_cuda_attention.cpp — attention in both orders of README.md "Attention summation order": the MMA
// order on tensor cores (attention_mma.cu, the default) and the scalar segment order
// (attention_segments.cu, CudaBackendOptions::attention_mma = false), each vs the CPU op, and each
// bit-identical across its split and chunk launch shapes and across batch sizes (the numerics contract:
// a token's output does not depend on what shares its call). Rows are random floats (the MMA order's
// three-product path: rows not exact in TF32) and, where marked, rounded through f16 as the KV cache
// stores them (exact in TF32: two products). Shapes: Flash CSA (128 raw + 512 selected of 700), HCA (128 raw + 16), raw only,
// short contexts (rows < 32, rows not a multiple of 32), and tiny head counts (4, 6, 8 heads: 4, 2 and
// 8 heads per block), and the Flash shapes of a prefill chunk (n = 2,048) and of decode at 2K and 32K
// context, where the MQA chunk kernel (two heads per warp) must give the one-head kernel's bits. The MMA
// order's kernel variants (CudaBackendOptions::attention_mma_kernels 0, 1, 3, 9, 10, 14, 18, 25, 26, 31, 32, 34, 37: previous, fast,
// softmax once per block, its chunk loop on int64 / 32-bit counters, its segments pipelined per warp, with 16 / 8
// lanes a row copied, 10 and 18 with q staged through shared memory and the exactness checks as independent chains, one
// decode query's sliced merge a programmatic dependent of its split kernel, 26 with a query's last segment formed only
// over its n-tiles and k-steps holding rows, that with its row copies spread over the score k-steps, 31 with the split
// kernel a programmatic dependent of the kernel before it, its rows staged before its wait (37); the split shape's merge
// spread over dim slices or not, attention_merge_sliced) bit for bit
// against the default in every shape, the merge's fallback (a host bound below the counts) included. Tolerance vs the CPU as test_cuda_ops.cpp: 1e-5 of max|ref| (online softmax in
// segments vs the CPU's two passes). Skips without a GPU.
#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>

#include "cuda_test_util.h"
#include "quant/half.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {

class CudaAttention : public CudaOpsTest {
 protected:
  // A backend with other attention options (made once per test).
  Backend& backend_with(int split_max_blocks, bool segments = true, int heads_per_warp = 2, bool mma = true,
                        int mma_kernels = cuda::CudaBackendOptions{}.attention_mma_kernels, bool merge_sliced = true) {
    cuda::CudaBackendOptions o;
    o.attention_mma_kernels = mma_kernels;
    o.attention_merge_sliced = merge_sliced;
    o.attention_mma = mma;
    o.attention_segments = segments;
    o.attention_split_max_blocks = split_max_blocks;
    o.attention_heads_per_warp = heads_per_warp;
    auto made = cuda::make_cuda_backend(o);
    EXPECT_TRUE(made.ok());
    extra_.push_back(std::move(made).value());
    return *extra_.back();
  }
  // The MMA order's kernel variants: previous kernels with the chunk-kernel merge, fast, softmax once per
  // block (each with its default split bound, and splitting whenever a bound is known).
  std::vector<std::pair<Backend*, Backend*>> mma_variants() {
    std::vector<std::pair<Backend*, Backend*>> v;
    v.emplace_back(&backend_with(128, true, 2, true, 0, false), &backend_with(INT_MAX, true, 2, true, 0, false));
    // 31: 3 with one query's sliced merge a programmatic dependent of its split kernel (n = 1, sm_90; with a bound
    // below the counts the merge's chunk-body fallback).
    // 37 (31 with the split kernel a programmatic dependent of the kernel before it, here an upload, its rows staged
    // before its wait): session 14 (after the q norm: test_cuda_small7.cpp).
    for (int k : {1, 3, 31, 37})
      v.emplace_back(&backend_with(128, true, 2, true, k), &backend_with(INT_MAX, true, 2, true, k));
    // 10 (kernel 3's chunk loop on 32-bit counters): the chunk shape at every n (the random-float cases: its
    // converted rows path), and whenever a bound is known the split shape.
    // 9: the previous int64 loop (3 takes 10's). 14: each warp's segments pipelined (chunk shape at every n; the
    // random-float cases run its converted-rows path, the f16 rows its as-is path).
    // 18: 14 with its copies 8 lanes a row (the default's pipelined form since session 12; 14 keeps 16 lanes a row).
    // 25, 26: 10 and 18 with q staged through shared memory (heads past the count zero-filled: the 4- and 6-head shapes)
    // and the exactness decision's checks as independent chains (the random-float cases decide for the converted path,
    // the f16 rows for the rows' bits) — session 13.
    // 32: 26 with a query's last segment formed only over its n-tiles and k-steps holding rows (HCA's 144-row queries: 16
    // rows there; the short shapes: one segment, ns = 1); 34: 32 with the interval's row copies spread over the score
    // k-steps — session 14.
    for (int k : {9, 10, 14, 18, 25, 26, 32, 34})
      v.emplace_back(&backend_with(0, true, 2, true, k), &backend_with(INT_MAX, true, 2, true, k));
    return v;
  }
  std::vector<std::unique_ptr<Backend>> extra_;
};

struct Shape {
  const char* name;
  int32_t heads, D, window;
  int32_t comp_rows;  // compressed rows held (0: no compressor)
  int32_t top_k;      // > 0: queries attend to selected rows (comp_idx), else to rows 0 … count−1
  int32_t pos0;       // first query's position (small: the window is not full yet)
  int32_t count0;     // first query's compressed rows; query i sees max(0, count0 − step·i)
  int32_t step;
};

// One case's host inputs, in the layout of AttentionArgs.
struct Inputs {
  int64_t n = 0, cap = 0;
  std::vector<int32_t> pos, count, idx;
  std::vector<float> q, raw, comp, sinks;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// x rounded through IEEE half, as the KV cache stores rows (MODEL.md §5.6).
std::vector<float> f16_rounded(std::vector<float> x) {
  for (float& v : x) v = f16_to_f32(f32_to_f16(v));
  return x;
}

// The backends of one order: its default dispatch, chunk shape only, split shape whenever a bound is
// known, and (scalar order) the one-head chunk kernel instead of the MQA one.
struct Order {
  const char* name;
  Backend* def;
  Backend* chunk;
  Backend* split;
  Backend* onehead;
  // MMA order: the other kernel variants (attention_mma_kernels, attention_merge_sliced), each with its
  // split shape whenever a bound is known (second).
  std::vector<std::pair<Backend*, Backend*>> variants = {};
};

}  // namespace

TEST_F(CudaAttention, SegmentOrderMatchesCpuAndIsBitIdenticalAcrossShapesAndBatches) {
  const Shape shapes[] = {
      {"flash csa", 64, 512, 128, 700, 512, 5000, 512, 3},  // 640 rows = 20 whole segments, ring wrapped
      {"flash hca", 64, 512, 128, 16, 0, 2101, 16, 1},      // 144 rows: 4.5 segments
      {"flash raw", 64, 512, 128, 0, 0, 3000, 0, 0},        // no compressor: 128 rows
      {"flash short", 64, 512, 128, 3, 512, 9, 3, 1},       // 10 raw + ≤ 3 selected: fewer rows than a segment
      {"flash short hca", 64, 512, 128, 5, 0, 40, 5, 2},    // 41 raw + ≤ 5: rows not a multiple of 32
      {"tiny h4", 4, 256, 16, 40, 16, 700, 16, 1},          // 4 heads per block
      {"tiny h6", 6, 128, 64, 90, 0, 300, 90, 7},           // 2 heads per block; some queries see 0 rows
      {"tiny h8", 8, 64, 16, 90, 32, 1200, 32, 5},
  };
  const Order orders[] = {
      {"mma", gpu_.get(), &backend_with(0), &backend_with(INT_MAX), &backend_with(0), mma_variants()},
      {"segments", &backend_with(128, true, 2, false), &backend_with(0, true, 2, false),
       &backend_with(INT_MAX, true, 2, false), &backend_with(0, true, 1, false)}};
  Backend& prev_be = backend_with(128, false, 2, false);  // the previous kernel (CudaBackendOptions switch)
  for (const Shape& s : shapes) {
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{40}}) {
      Inputs in;
      in.n = n;
      in.cap = s.window + n - 1;
      for (int64_t i = 0; i < n; ++i) in.pos.push_back(s.pos0 + static_cast<int32_t>(i));
      in.q = randn(static_cast<size_t>(n * s.heads * s.D), 0.2f);
      in.raw = randn(static_cast<size_t>(in.cap * s.D));
      in.comp = randn(static_cast<size_t>(std::max(1, s.comp_rows) * s.D));
      const bool f16_rows = n == 2 || n == 40;  // the cache's rows (exact in TF32); n = 1, 4: any floats
      if (f16_rows) {
        in.raw = f16_rounded(in.raw);
        in.comp = f16_rounded(in.comp);
      }
      in.sinks = randn(s.heads);
      const int32_t stride = std::max(1, s.top_k);
      in.count.resize(n);
      in.idx.assign(static_cast<size_t>(n * stride), 0);
      for (int64_t i = 0; i < n; ++i) {
        in.count[i] = std::max(0, s.count0 - s.step * static_cast<int32_t>(i));
        for (int32_t j = 0; j < in.count[i] && s.top_k > 0; ++j)
          in.idx[i * stride + j] = (j * 37 + static_cast<int32_t>(i)) % s.comp_rows;
      }
      const std::string where = std::string(s.name) + " n" + std::to_string(n) + (f16_rows ? " f16 rows" : "");

      AttentionArgs a;
      a.pos = in.pos.data();
      a.n = n;
      a.heads = s.heads;
      a.head_dim = s.D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      a.raw_cap = in.cap;
      a.window = s.window;
      a.comp_idx_stride = stride;
      a.max_comp = s.comp_rows;
      a.q = in.q.data();
      a.sinks = in.sinks.data();
      a.raw = in.raw.data();
      a.comp = s.comp_rows ? in.comp.data() : nullptr;
      a.comp_count = s.comp_rows ? in.count.data() : nullptr;
      a.comp_idx = s.top_k > 0 ? in.idx.data() : nullptr;
      std::vector<float> want(in.q.size());
      a.out = want.data();
      cpu_->attention(a);

      // Device inputs: uploaded through gpu_; every backend of the process shares the device memory.
      AttentionArgs g = a;
      g.q = dev(in.q);
      g.pos = dev(in.pos);
      g.sinks = dev(in.sinks);
      g.raw = dev(in.raw);
      g.comp = s.comp_rows ? dev(in.comp) : nullptr;
      g.comp_count = s.comp_rows ? dev(in.count) : nullptr;
      g.comp_idx = s.top_k > 0 ? dev(in.idx) : nullptr;
      for (const Order& ord : orders) {
        const std::string what = std::string("attention ") + ord.name + " " + where;
        auto run = [&](Backend& be, const AttentionArgs& args) {
          AttentionArgs r = args;
          r.out = poisoned(want.size());
          EXPECT_TRUE(gpu_->sync().ok());  // the NaN fill runs on gpu_'s stream; `be` may have its own
          be.attention(r);
          EXPECT_TRUE(be.sync().ok()) << what;
          return host(r.out, want.size());
        };
        const auto got = run(*ord.def, g);
        expect_close(got, want, 1e-5, 1e-7, what);
        EXPECT_TRUE(same_bits(run(*ord.chunk, g), got)) << what << ": chunk shape differs from the default";
        EXPECT_TRUE(same_bits(run(*ord.onehead, g), got)) << what << ": one-head chunk kernel differs from the default";
        EXPECT_TRUE(same_bits(run(*ord.split, g), got)) << what << ": split shape differs from the default";
        for (size_t v = 0; v < ord.variants.size(); ++v) {
          EXPECT_TRUE(same_bits(run(*ord.variants[v].first, g), got)) << what << ": kernel variant " << v << " differs";
          EXPECT_TRUE(same_bits(run(*ord.variants[v].second, g), got)) << what << ": kernel variant " << v << ", split shape";
        }
        AttentionArgs unbounded = g;  // no host bound without selection: the chunk shape
        unbounded.max_comp = 0;
        EXPECT_TRUE(same_bits(run(*ord.split, unbounded), got)) << what << ": without max_comp";
        if (s.comp_rows > 0) {
          AttentionArgs low = g;  // a bound below the real counts: the merge computes the segments past it
          low.max_comp = 1;
          EXPECT_TRUE(same_bits(run(*ord.split, low), got)) << what << ": max_comp below the counts";
          for (size_t v = 0; v < ord.variants.size(); ++v)
            EXPECT_TRUE(same_bits(run(*ord.variants[v].second, low), got)) << what << ": kernel variant " << v
                                                                            << ", max_comp below the counts";
        }
        if (&ord == &orders[0]) expect_close(run(prev_be, g), want, 1e-5, 1e-7, what + " (previous kernel)");

        // Across batch sizes: query i alone (a decode step, split shape) has the bits of row i of the call.
        if (n > 1) {
          const int64_t hd = static_cast<int64_t>(s.heads) * s.D;
          for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
            AttentionArgs one = g;
            one.n = 1;
            one.q = g.q + i * hd;
            one.pos = g.pos + i;
            if (g.comp_count) one.comp_count = g.comp_count + i;
            if (g.comp_idx) one.comp_idx = g.comp_idx + i * stride;
            const auto solo_all = run(*ord.def, one);  // sized for the whole call; only query 0 is written
            const std::vector<float> solo(solo_all.begin(), solo_all.begin() + hd);
            const std::vector<float> row(got.begin() + i * hd, got.begin() + (i + 1) * hd);
            EXPECT_TRUE(same_bits(solo, row)) << what << ": query " << i << " alone differs from its row in the batch";
          }
        }
      }
    }
  }
}

TEST_F(CudaAttention, RemovedKernelVariantsAreRejected) {
  for (int k : {2, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17, 19, 20, 21, 22, 23, 24, 27, 28, 33, 35, 36, 38, 39, -1}) {  // 15–17, 19, 20: session 12; 21–24, 27, 28: 13; 33, 35: 14; 36, 38, 39 never landed  // 2 and 4 (16 warps) were removed; 5–8, 11–13 never landed
    cuda::CudaBackendOptions o;
    o.attention_mma_kernels = k;
    auto made = cuda::make_cuda_backend(o);
    ASSERT_FALSE(made.ok()) << k;
    EXPECT_NE(made.status().to_string().find("attention_mma_kernels"), std::string::npos) << made.status().to_string();
  }
}

TEST_F(CudaAttention, LastSegmentTilesSkippedKeepTheBits) {
  // Kernel 32 (26 forming a query's last segment only over its n-tiles and k-steps holding rows) bit for bit against 26
  // and the default, and close to the CPU, on queries whose last segment holds every count 1 … 32: a full window (128 raw
  // rows) + 0 … 32 compressed rows, and young queries of 1 … 80 rows (one to three segments: the last interval also the
  // first). Rows as the KV cache holds them (f16: the rows' bits path, where the skip applies) and any floats (the
  // converted path), both with whole columns of −0.0 (a column's products all zero: skipping exact zeros must not change
  // a zero accumulator's sign either).
  const int32_t H = 64, D = 512, W = 128, C = 64;
  Backend& k26 = backend_with(0, true, 2, true, 26);
  Backend& k32 = backend_with(0, true, 2, true, 32);
  Backend& k34 = backend_with(0, true, 2, true, 34);
  for (bool young : {false, true}) {
    for (bool f16_rows : {true, false}) {
      const int64_t n = young ? 80 : 66, cap = W + n, hd = int64_t{H} * D;
      std::vector<int32_t> pos(n), count(n);
      for (int64_t i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>(young ? i : 1000 + i);
        count[i] = static_cast<int32_t>(young ? (i % 3 == 0 ? 0 : (i / 3) % 9) : i % 33);
      }
      auto q = randn(static_cast<size_t>(n * hd), 0.2f);
      auto raw = randn(static_cast<size_t>(cap * D));
      auto comp = randn(static_cast<size_t>(C * D));
      if (f16_rows) {
        raw = f16_rounded(raw);
        comp = f16_rounded(comp);
      }
      for (std::vector<float>* rows : {&raw, &comp})
        for (size_t r = 0; r < rows->size() / D; ++r)
          for (int d : {0, 1, 5, 64, 200, 201, 202, 203, 511}) (*rows)[r * D + d] = -0.0f;
      const auto sinks = randn(H);
      AttentionArgs a;
      a.pos = pos.data();
      a.n = n;
      a.heads = H;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      a.raw_cap = cap;
      a.window = W;
      a.comp_idx_stride = 1;
      a.max_comp = 32;
      a.q = q.data();
      a.sinks = sinks.data();
      a.raw = raw.data();
      a.comp = comp.data();
      a.comp_count = count.data();
      std::vector<float> want(q.size());
      a.out = want.data();
      cpu_->attention(a);
      AttentionArgs g = a;
      g.q = dev(q);
      g.pos = dev(pos);
      g.sinks = dev(sinks);
      g.raw = dev(raw);
      g.comp = dev(comp);
      g.comp_count = dev(count);
      const std::string what = std::string("attention mma last segment ") + (young ? "young" : "full window") +
                               (f16_rows ? " f16 rows" : " float rows");
      auto run = [&](Backend& be) {
        AttentionArgs r = g;
        r.out = poisoned(want.size());
        EXPECT_TRUE(gpu_->sync().ok());
        be.attention(r);
        EXPECT_TRUE(be.sync().ok()) << what;
        return host(r.out, want.size());
      };
      const auto got = run(k32);
      expect_close(got, want, 1e-5, 1e-7, what);
      EXPECT_TRUE(same_bits(run(k26), got)) << what << ": kernel 26 differs from 32";
      EXPECT_TRUE(same_bits(run(*gpu_), got)) << what << ": the default differs from 32";
      EXPECT_TRUE(same_bits(run(k34), got)) << what << ": kernel 34 (copies spread) differs from 32";
    }
  }
}

TEST_F(CudaAttention, PerQuerySessionStateBitIdenticalAcrossShapes) {
  // A batched step: queries of three sessions, each reading its own ring and compressed rows through
  // raw_at/comp_at (one session wrapped its ring), with and without selection.
  const int32_t heads = 64, D = 512, window = 128, comp_rows = 600, top_k = 512;
  const std::vector<int> sess = {0, 0, 1, 2, 2, 2};
  const int64_t n = static_cast<int64_t>(sess.size());
  const int64_t cap = window + 8;
  const std::vector<int32_t> pos = {2400, 2401, 2 * static_cast<int32_t>(cap) + 5, 7, 8, 2399};
  std::vector<std::vector<float>> raw, comp;
  std::vector<const float*> raw_at, comp_at, graw_at, gcomp_at, graw, gcomp;
  for (int k = 0; k < 3; ++k) {
    raw.push_back(randn(static_cast<size_t>(cap * D)));
    comp.push_back(randn(static_cast<size_t>(comp_rows * D)));
    graw.push_back(dev(raw.back()));
    gcomp.push_back(dev(comp.back()));
  }
  for (int k : sess) {
    raw_at.push_back(raw[k].data());
    comp_at.push_back(comp[k].data());
    graw_at.push_back(graw[k]);
    gcomp_at.push_back(gcomp[k]);
  }
  auto q = randn(static_cast<size_t>(n * heads * D), 0.2f);
  auto sinks = randn(heads);
  std::vector<int32_t> count(n), idx(n * top_k);
  for (int64_t i = 0; i < n; ++i) {
    count[i] = std::max(0, std::min(pos[i] / 4, top_k) - static_cast<int32_t>(5 * i));
    for (int32_t j = 0; j < count[i]; ++j) idx[i * top_k + j] = (j * 29 + static_cast<int32_t>(i)) % comp_rows;
  }
  const std::pair<Backend*, Backend*> pairs[] = {{gpu_.get(), &backend_with(0)},  // MMA: split vs chunk
                                                 {&backend_with(128, true, 2, true, 0, false), &backend_with(0, true, 2, true, 0)},
                                                 {&backend_with(128, true, 2, true, 1), &backend_with(0, true, 2, true, 1)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 3)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 14)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 18)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 25)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 26)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 32)},
                                                 {&backend_with(128, true, 2, true, 3), &backend_with(0, true, 2, true, 34)},
                                                 {&backend_with(128, true, 2, false), &backend_with(0, true, 2, false)}};
  for (const auto& [split_be, chunk_be] : pairs)
  for (bool selected : {false, true}) {
    AttentionArgs a;
    a.q = q.data();
    a.pos = pos.data();
    a.n = n;
    a.heads = heads;
    a.head_dim = D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.sinks = sinks.data();
    a.raw = raw[0].data();
    a.raw_cap = cap;
    a.window = window;
    a.comp = comp[0].data();
    a.comp_count = count.data();
    a.comp_idx = selected ? idx.data() : nullptr;
    a.comp_idx_stride = top_k;
    a.max_comp = top_k;
    a.raw_at = raw_at.data();
    a.comp_at = comp_at.data();
    std::vector<float> want(q.size());
    a.out = want.data();
    cpu_->attention(a);
    AttentionArgs g = a;
    g.q = dev(q);
    g.pos = dev(pos);
    g.sinks = dev(sinks);
    g.raw = graw[0];
    g.comp = gcomp[0];
    g.comp_count = dev(count);
    g.comp_idx = selected ? dev(idx) : nullptr;
    g.raw_at = dev(graw_at);
    g.comp_at = dev(gcomp_at);
    g.out = poisoned(want.size());
    split_be->attention(g);  // n·8 = 48 blocks: the split shape
    ASSERT_TRUE(split_be->sync().ok());
    const auto got = host(g.out, want.size());
    const std::string what = std::string("attention ") + (split_be == pairs[std::size(pairs) - 1].first ? "segments" : "mma") +
                             " per-query sessions" + (selected ? " selected" : "");
    expect_close(got, want, 1e-5, 1e-7, what);
    g.out = poisoned(want.size());
    ASSERT_TRUE(gpu_->sync().ok());  // the NaN fill runs on gpu_'s stream
    chunk_be->attention(g);
    ASSERT_TRUE(chunk_be->sync().ok());
    EXPECT_TRUE(same_bits(host(g.out, want.size()), got)) << what << ": chunk shape differs from the split shape";
  }
}

TEST_F(CudaAttention, FlashChunkAndDecodeShapesAt2KAnd32K) {
  // CSA: 128 raw + 512 selected of ctx/4 compressed rows (at 2K every row, at 32K 512 of 8,192 spread);
  // HCA: 128 raw + (pos + 1)/128 rows. n = 1 (decode: split shape), 40 and 2,048 (a prefill chunk: the
  // MQA chunk kernel). CPU parity on sampled queries (the CPU op over a whole chunk would take minutes
  // here); the whole call bit for bit against the one-head chunk kernel (and the split shape up to 40
  // queries); sampled queries alone (decode) bit for bit against their rows.
  const int32_t H = 64, D = 512, W = 128, TK = 512;
  const int64_t nmax = 2048, hd = int64_t{H} * D, cap = W + nmax;
  // Each order: its default, then the other chunk kernel (MMA: chunk shape only; scalar: the one-head
  // kernel instead of the MQA one) and its split shape.
  const Order orders[] = {{"mma", gpu_.get(), &backend_with(0), &backend_with(INT_MAX), nullptr, mma_variants()},
                          {"segments", &backend_with(128, true, 2, false), &backend_with(0, true, 1, false),
                           &backend_with(INT_MAX, true, 2, false), nullptr}};
  const auto q = randn(static_cast<size_t>(nmax * hd), 0.2f);
  const auto sinks = randn(H);
  const auto raw = f16_rounded(randn(static_cast<size_t>(cap * D)));  // rows as the KV cache holds them
  const auto comp = f16_rounded(randn(static_cast<size_t>(8192 * D)));
  const float *gq = dev(q), *gsinks = dev(sinks), *graw = dev(raw), *gcomp = dev(comp);
  for (int64_t ctx : {int64_t{2048}, int64_t{32768}}) {
    for (bool csa : {true, false}) {
      for (int64_t n : {int64_t{1}, int64_t{40}, nmax}) {
      for (const Order& ord : orders) {
        const std::string what = std::string("attention ") + ord.name + " flash " + (csa ? "CSA" : "HCA") + " ctx" +
                                 std::to_string(ctx) + " n" + std::to_string(n);
        const int64_t comp_rows = ctx / 4, spread = std::max<int64_t>(1, comp_rows / TK);
        std::vector<int32_t> pos(n), count(n), idx(n * TK);
        for (int64_t i = 0; i < n; ++i) {
          pos[i] = static_cast<int32_t>(ctx + i);
          count[i] = csa ? TK : (pos[i] + 1) / 128;
          for (int64_t j = 0; j < TK; ++j)
            idx[i * TK + j] = static_cast<int32_t>(comp_rows <= TK ? j : j * spread + (i * 7 + j * 13) % spread);
        }
        AttentionArgs g;
        g.q = gq;
        g.pos = dev(pos);
        g.n = n;
        g.heads = H;
        g.head_dim = D;
        g.scale = 1.0f / std::sqrt(static_cast<float>(D));
        g.sinks = gsinks;
        g.raw = graw;
        g.raw_cap = cap;
        g.window = W;
        g.comp = gcomp;
        g.comp_count = dev(count);
        g.comp_idx = csa ? dev(idx) : nullptr;
        g.comp_idx_stride = TK;
        g.max_comp = csa ? TK : (ctx + n) / 128;
        auto run = [&](Backend& be, const AttentionArgs& args) {
          AttentionArgs r = args;
          r.out = poisoned(static_cast<size_t>(r.n * hd));
          EXPECT_TRUE(gpu_->sync().ok());
          be.attention(r);
          EXPECT_TRUE(be.sync().ok()) << what;
          return host(r.out, static_cast<size_t>(r.n * hd));
        };
        const auto got = run(*ord.def, g);
        EXPECT_TRUE(same_bits(run(*ord.chunk, g), got)) << what << ": the other chunk kernel differs";
        for (size_t v = 0; v < ord.variants.size(); ++v) {
          EXPECT_TRUE(same_bits(run(*ord.variants[v].first, g), got)) << what << ": kernel variant " << v << " differs";
          if (n <= 40)
            EXPECT_TRUE(same_bits(run(*ord.variants[v].second, g), got)) << what << ": kernel variant " << v << ", split shape";
        }
        if (n <= 40) {
          EXPECT_TRUE(same_bits(run(*ord.split, g), got)) << what << ": split shape differs";
        }
        for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
          AttentionArgs a = g;  // query i alone, on the CPU and (as a decode step) on the GPU
          a.n = 1;
          a.q = q.data() + i * hd;
          a.pos = pos.data() + i;
          a.sinks = sinks.data();
          a.raw = raw.data();
          a.comp = comp.data();
          a.comp_count = count.data() + i;
          a.comp_idx = csa ? idx.data() + i * TK : nullptr;
          std::vector<float> want(static_cast<size_t>(hd));
          a.out = want.data();
          cpu_->attention(a);
          const std::vector<float> row(got.begin() + i * hd, got.begin() + (i + 1) * hd);
          expect_close(row, want, 1e-5, 1e-7, what + " q" + std::to_string(i));
          AttentionArgs one = g;
          one.n = 1;
          one.q = g.q + i * hd;
          one.pos = g.pos + i;
          one.comp_count = g.comp_count + i;
          if (csa) one.comp_idx = g.comp_idx + i * TK;
          EXPECT_TRUE(same_bits(run(*ord.def, one), row)) << what << ": query " << i << " alone differs from its row";
        }
      }
    }
  }
  }
}
