// test_cuda_csa.cpp — the decode chain of a CSA layer on CUDA: the indexer of decode and batched decode
// steps (ops_indexer.cu indexer_score_decode_kernel, CudaBackendOptions::indexer_decode) against the
// previous kernels (indexer_decode = false, indexer_select = 0), the fused score + select launch
// (indexer_select = 2; 3: q and w loaded before the row count; 4: also the radix select's lean end; 5: the wide
// kernel — scores, a global histogram of the keys' top bits, the last block's select — for every decode call; 6: 4
// up to 2,048 rows, the wide kernel above; 7, 8: 5, 6 with fused dot steps where exact — here the plain floats
// make every block take the plain chain; 9 … 12: 5 … 8's with the register-blocked tile where a block has 32 or 64
// rows; 13: 11 with the tiles' rows by asynchronous copies; 14: 13 with 32-row blocked tiles, two blocks an SM) and
// the CPU op, selected ids equal, at the Flash shapes (64 heads × 128,
// top 512) for n = 1, 2, 5, 8, 32 queries and contexts 2K, 8K, 32K and 33K (8,250 rows: the wide kernel's 64-key
// runs, a row stride not a multiple of 4); sessions at different positions (per-query row counts and,
// batched, per-query rows through rows_at), queries that see ≤ top_k rows mixed in, and duplicated rows
// for exact score ties (the lower id wins).
// Also the prefill indexer on int8 tensor cores (indexer_mma) against the CUDA-core tiles and the CPU.
// Deliberately not here: the other prefill-sized indexer calls (test_cuda_ops.cpp) and the compressor.
#include <algorithm>

#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

using CudaCsa = CudaOpsTest;

TEST_F(CudaCsa, IndexerDecodeEqualsPreviousKernelsAndCpu) {
  const int32_t IH = 64, ID = 128, TK = 512;
  cuda::CudaBackendOptions o;
  o.indexer_decode = false;
  o.indexer_select = 0;  // and the previous radix select (its own launch, the 32-step digit search)
  auto made = cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto prev = std::move(made).value();
  cuda::CudaBackendOptions fo;  // the scores and the selection in one launch (≤ 2,048 rows)
  fo.indexer_select = 2;
  auto made_f = cuda::make_cuda_backend(fo);
  ASSERT_TRUE(made_f.ok());
  auto fused = std::move(made_f).value();
  // The fused launch with q and w loaded before the row count (3), and with the radix select's lean end
  // and one-scan compaction (4); the wide kernel always (5) and above 2,048 rows (6), both with the fused dot steps
  // where exact (7, 8), and those four with the register-blocked tile (9 … 12); 11 with the tiles' rows by
  // asynchronous copies (13), and with 32-row blocked tiles two per multiprocessor (14).
  const std::vector<int> sels = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 18};
  std::vector<std::unique_ptr<Backend>> sorts;
  for (int sel : sels) {
    cuda::CudaBackendOptions so;
    so.indexer_select = sel;
    auto made_s = cuda::make_cuda_backend(so);
    ASSERT_TRUE(made_s.ok());
    sorts.push_back(std::move(made_s).value());
  }
  for (int64_t ctx : {int64_t{2048 + 100}, int64_t{8192}, int64_t{32768}, int64_t{33000}}) {
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{32}}) {
      for (bool per_query : {false, true}) {
        if (per_query && n == 1) continue;
        // Query i at position ctx − 37·i (sessions at different positions); with n ≥ 5 one query sees
        // ≤ top_k rows (a session below 2K in the same batched step).
        std::vector<int32_t> nr(n);
        for (int64_t i = 0; i < n; ++i) nr[i] = static_cast<int32_t>((ctx - 37 * i + 1) / 4);
        if (n >= 5) nr[3] = TK - 9;
        const int32_t bound = *std::max_element(nr.begin(), nr.end());
        const int64_t sessions = per_query ? n : 1;
        std::vector<std::vector<float>> rows(sessions);
        for (auto& r : rows) {
          r = randn(static_cast<size_t>(int64_t{bound} * ID));
          for (int32_t c = bound - bound / 8; c < bound; ++c)  // ties: copies of earlier rows
            std::copy_n(r.begin() + int64_t{c % 97} * ID, ID, r.begin() + int64_t{c} * ID);
        }
        auto q = randn(static_cast<size_t>(n * IH * ID));
        auto w = randn(static_cast<size_t>(n * IH), 0.1f);

        // Default backend (the decode kernel).
        std::vector<const float*> at(n);
        std::vector<float*> grows(sessions);
        for (int64_t s = 0; s < sessions; ++s) grows[s] = dev(rows[s]);
        for (int64_t i = 0; i < n; ++i) at[i] = grows[per_query ? i : 0];
        IndexerArgs g{dev(q), dev(w), grows[0], dev(nr), n, IH, ID, TK, poisoned_i32(n * TK), poisoned_i32(n)};
        if (per_query) g.rows_at = dev(at);
        g.max_rows = bound;
        // The previous kernels read the same device inputs (one process, one device) into their own outputs.
        IndexerArgs p = g;
        p.idx = poisoned_i32(n * TK);
        p.count = poisoned_i32(n);
        gpu_->indexer(g);
        ASSERT_TRUE(gpu_->sync().ok());
        prev->indexer(p);
        ASSERT_TRUE(prev->sync().ok());
        IndexerArgs f = g;
        f.idx = poisoned_i32(n * TK);
        f.count = poisoned_i32(n);
        fused->indexer(f);
        ASSERT_TRUE(fused->sync().ok());
        const auto idx = host(g.idx, n * TK), cnt = host(g.count, n);
        const auto pidx = host(p.idx, n * TK), pcnt = host(p.count, n);
        const auto fidx = host(f.idx, n * TK), fcnt = host(f.count, n);
        std::vector<std::vector<int32_t>> sidx, scnt;
        for (auto& be : sorts) {
          IndexerArgs so_args = g;
          so_args.idx = poisoned_i32(n * TK);
          so_args.count = poisoned_i32(n);
          settle();  // the poisoned outputs were filled on gpu_'s stream
          be->indexer(so_args);
          ASSERT_TRUE(be->sync().ok());
          sidx.push_back(host(so_args.idx, n * TK));
          scnt.push_back(host(so_args.count, n));
        }

        int64_t differ = 0;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(cnt[i], pcnt[i]) << "query " << i;
          ASSERT_EQ(cnt[i], fcnt[i]) << "query " << i;
          for (size_t v = 0; v < sorts.size(); ++v)
            ASSERT_EQ(cnt[i], scnt[v][i]) << "query " << i << " (select " << sels[v] << ")";
          ASSERT_EQ(cnt[i], std::min(nr[i], TK)) << "query " << i;
          for (int32_t j = 0; j < cnt[i]; ++j)
            differ += (idx[i * TK + j] != pidx[i * TK + j]) + (idx[i * TK + j] != fidx[i * TK + j]);
          for (int32_t j = 0; j < cnt[i]; ++j)
            for (const auto& si : sidx) differ += idx[i * TK + j] != si[i * TK + j];
        }
        // The CPU op for the first, a middle and the last query (every query at 32K would be slow here).
        for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
          std::vector<int32_t> want(TK, -7), wcnt(1, -7);
          IndexerArgs a{q.data() + i * IH * ID, w.data() + i * IH, rows[per_query ? i : 0].data(), nr.data() + i, 1,
                        IH, ID, TK, want.data(), wcnt.data()};
          cpu_->indexer(a);
          ASSERT_EQ(cnt[i], wcnt[0]) << "query " << i;
          for (int32_t j = 0; j < wcnt[0]; ++j) differ += idx[i * TK + j] != want[j];
        }
        EXPECT_EQ(differ, 0) << "ctx " << ctx << " n " << n << (per_query ? " per-query rows" : "");
        std::printf("PARITY %-44s n=%-9lld selected ids differing: %lld  %s\n",
                    ("indexer decode ctx" + std::to_string(ctx) + " n" + std::to_string(n) +
                     (per_query ? " rows_at" : "")).c_str(),
                    static_cast<long long>(n * TK), static_cast<long long>(differ), differ ? "FAIL" : "ok");
      }
    }
  }
}

// Shapes the decode kernel does not take (heads 8, head_dim 32) and 16 heads of 64 (which it does) against
// the CPU: the dispatch falls back without a launch error, and the selection is the CPU's either way —
// with the default select and with indexer_select = 3 … 10, 13 and 14 (32 heads of 128: the wide kernel with 8 slots
// a head, 1,000 and 3,000 rows, top 64; 9, 10, 13 and 14 keep the unblocked tile at 32 heads).
TEST_F(CudaCsa, IndexerDecodeOtherShapesMatchCpu) {
  struct S {
    int32_t heads, head_dim, top_k, rows;
  };
  std::vector<std::unique_ptr<Backend>> sorts;
  std::vector<Backend*> bes = {gpu_.get()};
  const std::vector<int> sels = {2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 17, 18};  // [0]: gpu_'s (the default, 2)
  for (size_t si = 1; si < sels.size(); ++si) {
    const int sel = sels[si];
    cuda::CudaBackendOptions so;
    so.indexer_select = sel;
    auto made_s = cuda::make_cuda_backend(so);
    ASSERT_TRUE(made_s.ok());
    sorts.push_back(std::move(made_s).value());
    bes.push_back(sorts.back().get());
  }
  for (size_t bi = 0; bi < bes.size(); ++bi)
  for (S s : {S{8, 32, 16, 300}, S{16, 64, 32, 700}, S{32, 128, 64, 1000}, S{32, 128, 64, 3000}}) {
    Backend* be = bes[bi];
    for (int64_t n : {int64_t{1}, int64_t{3}}) {
      std::vector<int32_t> nr(n);
      for (int64_t i = 0; i < n; ++i) nr[i] = s.rows - static_cast<int32_t>(5 * i);
      auto q = randn(static_cast<size_t>(n * s.heads * s.head_dim));
      auto w = randn(static_cast<size_t>(n * s.heads), 0.1f);
      auto rows = randn(static_cast<size_t>(int64_t{s.rows} * s.head_dim));
      std::vector<int32_t> want(n * s.top_k, -7), wcnt(n, -7);
      cpu_->indexer({q.data(), w.data(), rows.data(), nr.data(), n, s.heads, s.head_dim, s.top_k, want.data(), wcnt.data()});
      IndexerArgs g{dev(q), dev(w), dev(rows), dev(nr), n, s.heads, s.head_dim, s.top_k, poisoned_i32(n * s.top_k),
                    poisoned_i32(n)};
      g.max_rows = s.rows;
      settle();  // the inputs were filled on gpu_'s stream
      be->indexer(g);
      ASSERT_TRUE(be->sync().ok());
      const auto idx = host(g.idx, n * s.top_k), cnt = host(g.count, n);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(cnt[i], wcnt[i]);
        for (int32_t j = 0; j < cnt[i]; ++j) differ += idx[i * s.top_k + j] != want[i * s.top_k + j];
      }
      EXPECT_EQ(differ, 0) << "heads " << s.heads << " head_dim " << s.head_dim << " rows " << s.rows << " n " << n
                           << " (select " << sels[bi] << ")";
    }
  }
}

// The wide decode kernel (indexer_select 5 … 12) at the edges of its selection, against the CPU op and select 4:
// host bounds above the counts (the forward pass's bucketed max_rows: grids with idle blocks, key runs past the
// count), every score equal (q = 0: one histogram bin, T = 0, the 512 lowest ids), three distinct rows only (ties
// across bins and passes), all scores ≤ 0 (negative keys), a query that sees ≤ top_k rows beside two that do not,
// and the row counts at the kernel's run sizes (2,048, 8,192, 16,384). FP4 operands as the model makes them (the
// CPU's indexer_qat; rows also through f16): the fused dot steps of 7 and 8 — with one row, or one q head, of plain
// floats (that block, or that query, takes the plain chain), a row with a value 2^70 (exponent out of range), and
// FP4 ties (copies of earlier rows). 9 … 12: the register-blocked tile (64-row blocks from ~8K rows, 32-row ones
// from ~4K at n = 3; a count that ends a block mid-group of 4); 13: 11 with the tiles' rows by asynchronous copies;
// 14: 13 with 32-row blocked tiles at every bound (two blocks an SM; 64 keys a thread past 8,192 rows). Every score
// equal also at 1,500 rows (the fused kernel's select: one digit in every pass). 17: 14 with the selects' all-equal
// checks (the wide and the fused kernel's) — every score equal at the 32K step's bound (10,240: 64 keys a thread), and
// near_equal: a fifth of the rows row 0 scaled by 1 + 2^-18, the rest row 0 (one 11-bit bin, > half the keys, not all
// equal: the passes), also at 1,500 rows; 18: 17 with 40 keys a thread up to 10,240 rows (10,240 rows: 40 each).
TEST_F(CudaCsa, IndexerDecodeWideEdgesMatchCpu) {
  const int32_t IH = 64, ID = 128, TK = 512;
  std::vector<std::unique_ptr<Backend>> bes;
  const std::vector<int> sels = {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 17, 18};
  for (int sel : sels) {
    cuda::CudaBackendOptions so;
    so.indexer_select = sel;
    auto made_s = cuda::make_cuda_backend(so);
    ASSERT_TRUE(made_s.ok());
    bes.push_back(std::move(made_s).value());
  }
  enum class Data { random, q_zero, three_rows, negative, fp4, fp4_plain_row, fp4_plain_q, fp4_huge, fp4_ties, near_equal };
  struct Case {
    int32_t rows;
    int64_t bound;
    Data data;
  };
  const Case cases[] = {{8193, 10240, Data::random},    {5000, 16384, Data::random},    {2049, 2560, Data::random},
                        {600, 1024, Data::random},      {2048, 2048, Data::random},     {8192, 8192, Data::random},
                        {16384, 16384, Data::random},   {8192, 8192, Data::q_zero},     {9000, 10240, Data::three_rows},
                        {3000, 4096, Data::negative},   {700, 1024, Data::three_rows},  {8192, 8192, Data::fp4},
                        {8193, 10240, Data::fp4_plain_row}, {2100, 2560, Data::fp4_plain_q}, {600, 1024, Data::fp4},
                        {5000, 8192, Data::fp4_huge},   {16000, 16384, Data::fp4_ties}, {6003, 6144, Data::fp4},
                        {4097, 4608, Data::random},     {1500, 2048, Data::q_zero},     {8192, 10240, Data::q_zero},
                        {8190, 10240, Data::near_equal}, {3000, 4096, Data::near_equal}, {16384, 16384, Data::q_zero},
                        {10240, 10240, Data::random},   {10240, 10240, Data::q_zero},   {1500, 2048, Data::near_equal}};
  for (const Case& cs : cases) {
    const int64_t n = 3;
    const std::vector<int32_t> nr = {cs.rows, TK - 20, cs.rows - 77};
    auto q = randn(static_cast<size_t>(n * IH * ID));
    auto w = randn(static_cast<size_t>(n * IH), 0.1f);
    auto rows = randn(static_cast<size_t>(int64_t{cs.rows} * ID));
    if (cs.data == Data::q_zero) std::fill(q.begin(), q.end(), 0.0f);
    if (cs.data == Data::three_rows)
      for (int32_t c = 3; c < cs.rows; ++c) std::copy_n(rows.begin() + int64_t{c % 3} * ID, ID, rows.begin() + int64_t{c} * ID);
    if (cs.data == Data::negative)
      for (float& v : w) v = -std::fabs(v);
    if (cs.data == Data::near_equal) {
      for (float& v : w) v = std::fabs(v);
      for (int32_t c = 1; c < cs.rows; ++c)
        for (int32_t d = 0; d < ID; ++d)
          rows[int64_t{c} * ID + d] = c % 5 == 0 ? rows[d] * (1.0f + std::ldexp(1.0f, -18)) : rows[d];
    }
    if (cs.data >= Data::fp4 && cs.data <= Data::fp4_ties) {
      cpu_->indexer_qat({q.data(), n * IH, ID});
      IndexerQatArgs rq{rows.data(), cs.rows, ID};
      rq.f16 = true;
      cpu_->indexer_qat(rq);
    }
    if (cs.data == Data::fp4_plain_row) {  // row 4,100 (block 64 at 64 rows a block): plain floats
      const auto plain = randn(ID);
      std::copy(plain.begin(), plain.end(), rows.begin() + int64_t{4100} * ID);
    }
    if (cs.data == Data::fp4_plain_q) {  // query 2's head 7: plain floats
      const auto plain = randn(ID);
      std::copy(plain.begin(), plain.end(), q.begin() + (2 * IH + 7) * ID);
    }
    if (cs.data == Data::fp4_huge) rows[int64_t{1234} * ID + 5] = std::ldexp(1.0f, 70);
    if (cs.data == Data::fp4_ties)
      for (int32_t c = cs.rows - cs.rows / 4; c < cs.rows; ++c)
        std::copy_n(rows.begin() + int64_t{c % 131} * ID, ID, rows.begin() + int64_t{c} * ID);
    std::vector<int32_t> want(n * TK, -7), wcnt(n, -7);
    cpu_->indexer({q.data(), w.data(), rows.data(), nr.data(), n, IH, ID, TK, want.data(), wcnt.data()});
    const float *gq = dev(q), *gw = dev(w), *grows = dev(rows);
    const int32_t* gnr = dev(nr);
    for (size_t b = 0; b < bes.size(); ++b) {
      IndexerArgs g{gq, gw, grows, gnr, n, IH, ID, TK, nullptr, nullptr};
      g.max_rows = cs.bound;
      for (int rep = 0; rep < 2; ++rep) {  // twice, fresh outputs: the counters and histograms left at zero for the next call
        g.idx = poisoned_i32(n * TK);
        g.count = poisoned_i32(n);
        settle();  // the inputs and poisoned outputs were filled on gpu_'s stream
        bes[b]->indexer(g);
        ASSERT_TRUE(bes[b]->sync().ok());
      }
      const auto idx = host(g.idx, n * TK), cnt = host(g.count, n);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(cnt[i], wcnt[i]) << "query " << i;
        for (int32_t j = 0; j < cnt[i]; ++j) differ += idx[i * TK + j] != want[i * TK + j];
      }
      EXPECT_EQ(differ, 0) << "rows " << cs.rows << " bound " << cs.bound << " data " << static_cast<int>(cs.data)
                           << " select " << sels[b];
      std::printf("PARITY %-44s n=%-9lld selected ids differing: %lld  %s\n",
                  ("indexer wide rows" + std::to_string(cs.rows) + " bound" + std::to_string(cs.bound) + " data" +
                   std::to_string(static_cast<int>(cs.data)) + " sel" + std::to_string(sels[b]))
                      .c_str(),
                  static_cast<long long>(n * TK), static_cast<long long>(differ), differ ? "FAIL" : "ok");
    }
  }
}

// Prefill chunks' indexer scores on int8 tensor cores (indexer_mma.cu, CudaBackendOptions::indexer_mma)
// against the CUDA-core tiles (the default) and the CPU op, selected ids equal. q heads and rows are FP4
// round trips as the model makes them (the CPU's indexer_qat; rows also rounded through f16, as cached),
// so they decompose into int8 codes times a power of two — except the ones made not to: a q head of plain
// floats, a row with one value 2^10 times larger (codes past 7 bits), an all-zero q head and row; those
// take the sequential dot. Rows duplicated for ties. n = 2,048 at 2K (512 … 1,024 rows: row tiles cut by
// the causal counts), n = 40 at 32K (8,192 rows), n = 37 with queries that see ≤ top_k rows.
TEST_F(CudaCsa, IndexerPrefillOnInt8TensorCoresEqualsTilesAndCpu) {
  const int32_t IH = 64, ID = 128, TK = 512;
  cuda::CudaBackendOptions o;
  o.indexer_mma = true;
  auto made = cuda::make_cuda_backend(o);
  ASSERT_TRUE(made.ok());
  auto mma = std::move(made).value();
  struct Case {
    int64_t ctx, n;
  };
  for (Case cs : {Case{2048, 2048}, Case{32768, 40}, Case{2100, 37}}) {
    const int64_t n = cs.n;
    std::vector<int32_t> nr(n);
    for (int64_t i = 0; i < n; ++i) nr[i] = static_cast<int32_t>((cs.ctx + i + 1) / 4);
    if (n == 37) nr[5] = TK - 3, nr[30] = TK;  // no scoring for these two
    const int32_t total = *std::max_element(nr.begin(), nr.end());
    auto q = randn(static_cast<size_t>(n * IH * ID));
    auto w = randn(static_cast<size_t>(n * IH), 0.1f);
    auto rows = randn(static_cast<size_t>(int64_t{total} * ID));
    cpu_->indexer_qat({q.data(), n * IH, ID});
    IndexerQatArgs rq{rows.data(), total, ID};
    rq.f16 = true;
    cpu_->indexer_qat(rq);
    for (int32_t c = total - total / 8; c < total; ++c)  // ties: copies of earlier rows
      std::copy_n(rows.begin() + int64_t{c % 97} * ID, ID, rows.begin() + int64_t{c} * ID);
    const auto plain = randn(ID);
    std::copy(plain.begin(), plain.end(), q.begin() + (3 * IH + 5) * ID);  // q head (3, 5): not FP4
    std::fill_n(q.begin() + (1 * IH + 9) * ID, ID, 0.0f);                  // q head (1, 9): zeros
    rows[17 * ID + 40] *= 1024.0f;                                          // row 17: a 17-bit code
    std::fill_n(rows.begin() + 20 * ID, ID, 0.0f);                          // row 20: zeros
    std::vector<Backend*> bes = {gpu_.get(), mma.get()};
    std::vector<std::vector<int32_t>> got_idx, got_cnt;
    const float *gq = dev(q), *gw = dev(w), *grows = dev(rows);
    const int32_t* gnr = dev(nr);
    for (Backend* be : bes) {
      IndexerArgs g{gq, gw, grows, gnr, n, IH, ID, TK, poisoned_i32(n * TK), poisoned_i32(n)};
      g.max_rows = (total + 127) / 128 * 128;  // the forward pass's bucketed bound
      ASSERT_TRUE(gpu_->sync().ok());
      be->indexer(g);
      ASSERT_TRUE(be->sync().ok());
      got_idx.push_back(host(g.idx, n * TK));
      got_cnt.push_back(host(g.count, n));
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got_cnt[1][i], got_cnt[0][i]) << "query " << i;
      for (int32_t j = 0; j < got_cnt[0][i]; ++j) differ += got_idx[1][i * TK + j] != got_idx[0][i * TK + j];
    }
    for (int64_t i : {int64_t{1}, int64_t{3}, n / 2, n - 1}) {  // the odd q heads' queries and two others
      std::vector<int32_t> want(TK, -7), wcnt(1, -7);
      cpu_->indexer({q.data() + i * IH * ID, w.data() + i * IH, rows.data(), nr.data() + i, 1, IH, ID, TK, want.data(),
                     wcnt.data()});
      ASSERT_EQ(got_cnt[1][i], wcnt[0]) << "query " << i;
      for (int32_t j = 0; j < wcnt[0]; ++j) differ += got_idx[1][i * TK + j] != want[j];
    }
    EXPECT_EQ(differ, 0) << "ctx " << cs.ctx << " n " << n;
    std::printf("PARITY %-44s n=%-9lld selected ids differing: %lld  %s\n",
                ("indexer int8 mma ctx" + std::to_string(cs.ctx) + " n" + std::to_string(n)).c_str(),
                static_cast<long long>(n * TK), static_cast<long long>(differ), differ ? "FAIL" : "ok");
  }
}

// Backend::matmul_many on CUDA (matmul_f16_many.cu: a CSA layer's six F16 projections in one launch) ≡ one
// matmul() per job bit for bit, at n = 1, 2, 5, 8, 32 (one launch) and 33 (one matmul per job), with
// a Q8_0 job in the call (also one matmul per job), and within the F16 tolerance of the CPU op.
TEST_F(CudaCsa, MatmulManyEqualsOneMatmulPerJobBitForBit) {
  struct Shape {
    GgmlType type;
    int64_t rows, cols;
  };
  // compressor kv, gate; indexer compressor kv, gate; indexer q_b (over q_a's 1024); indexer weights;
  // a ragged one (rows not a multiple of 4, one partial segment).
  const Shape shapes[] = {{GgmlType::F16, 1024, 4096}, {GgmlType::F16, 1024, 4096}, {GgmlType::F16, 256, 4096},
                          {GgmlType::F16, 256, 4096},  {GgmlType::F16, 8192, 1024}, {GgmlType::F16, 64, 4096},
                          {GgmlType::F16, 13, 1000}};
  const int64_t n_max = 33;
  std::vector<DeviceMatmul> mats;
  for (const Shape& s : shapes) mats.push_back(device_matmul(s.type, s.rows, s.cols, n_max));
  for (bool with_q8 : {false, true}) {
    DeviceMatmul q8;
    if (with_q8) q8 = device_matmul(GgmlType::Q8_0, 512, 4096, n_max);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{32}, int64_t{33}}) {
      std::vector<MatmulArgs> jobs;
      std::vector<float*> outs;
      auto add = [&](const DeviceMatmul& m) {
        float* y = poisoned(static_cast<size_t>(n * m.w.rows));
        outs.push_back(y);
        jobs.push_back({m.gw, m.gx, m.w.cols, y, m.w.rows, n, MatmulNumerics::ds4});
      };
      for (const DeviceMatmul& m : mats) add(m);
      if (with_q8) add(q8);
      gpu_->matmul_many(jobs);
      ASSERT_TRUE(gpu_->sync().ok());
      int64_t differ = 0;
      double max_rel = 0;
      for (size_t k = 0; k < jobs.size(); ++k) {
        const DeviceMatmul& m = k < mats.size() ? mats[k] : q8;
        const auto got = host(outs[k], static_cast<size_t>(n * m.w.rows));
        const auto want = matmul_slice(m, 0, n);
        for (size_t e = 0; e < got.size(); ++e)
          differ += std::memcmp(&got[e], &want[e], 4) != 0;
        if (m.w.type == GgmlType::F16) {  // the CPU op for the first and last vector
          for (int64_t v : {int64_t{0}, n - 1}) {
            std::vector<float> ref(static_cast<size_t>(m.w.rows));
            cpu_->matmul({m.w, m.x.data() + v * m.w.cols, m.w.cols, ref.data(), m.w.rows, 1, MatmulNumerics::ds4});
            double mx = 0, md = 0;
            for (int64_t o = 0; o < m.w.rows; ++o) {
              mx = std::max(mx, std::fabs(double{ref[o]}));
              md = std::max(md, std::fabs(double{ref[o]} - got[v * m.w.rows + o]));
            }
            max_rel = std::max(max_rel, md / std::max(mx, 1e-30));
          }
        }
      }
      EXPECT_EQ(differ, 0) << "n " << n << (with_q8 ? " with a Q8_0 job" : "");
      EXPECT_LE(max_rel, 2e-5) << "n " << n;
      std::printf("PARITY %-44s n=%-9lld values differing from one matmul per job: %lld, vs CPU %.2e  %s\n",
                  ("matmul_many f16 csa projections" + std::string(with_q8 ? " + q8_0" : "")).c_str(),
                  static_cast<long long>(n), static_cast<long long>(differ), max_rel,
                  differ == 0 && max_rel <= 2e-5 ? "ok" : "FAIL");
    }
  }
}
