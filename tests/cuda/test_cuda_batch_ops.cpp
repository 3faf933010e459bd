// test_cuda_batch_ops.cpp — the per-query session-state tables of the attention and indexer ops (a
// batched step: queries of several sessions in one call, each reading its own ring, compressed rows and
// indexer rows through AttentionArgs::raw_at/comp_at and IndexerArgs::rows_at) vs the CPU op with the
// same tables. Tolerances as test_cuda_ops.cpp: attention 1e-5 of max|ref|, selection exact.
#include <algorithm>
#include <cstring>

#include "cuda_test_util.h"

using namespace ds4;
using namespace ds4::backend;
using namespace ds4::test;

namespace {
using CudaBatchOps = CudaOpsTest;
}  // namespace

TEST_F(CudaBatchOps, AttentionPerQuerySessionState) {
  struct S {
    int32_t heads, D, window, n_comp_rows, top_k;
  };
  for (S s : {S{4, 256, 16, 40, 16}, S{64, 512, 128, 700, 512}}) {
    // Three sessions: two queries of a prefill chunk, one decode query (ring wrapped), three more.
    const std::vector<int> sess = {0, 0, 1, 2, 2, 2};
    const int64_t n = static_cast<int64_t>(sess.size());
    const int64_t cap = s.window + 8;
    const int32_t base = randint(0, 3000);
    const std::vector<int32_t> pos = {base, base + 1, base + 2 * static_cast<int32_t>(cap) + 5, 7, 8, 9};
    std::vector<std::vector<float>> raw, comp;
    std::vector<const float*> raw_at, comp_at, graw_at, gcomp_at;
    std::vector<const float*> graw, gcomp;
    for (int k = 0; k < 3; ++k) {
      raw.push_back(randn(static_cast<size_t>(cap * s.D)));
      comp.push_back(randn(static_cast<size_t>(s.n_comp_rows * s.D)));
      graw.push_back(dev(raw.back()));
      gcomp.push_back(dev(comp.back()));
    }
    for (int k : sess) {
      raw_at.push_back(raw[k].data());
      comp_at.push_back(comp[k].data());
      graw_at.push_back(graw[k]);
      gcomp_at.push_back(gcomp[k]);
    }
    auto q = randn(static_cast<size_t>(n * s.heads * s.D), 0.2f);
    auto sinks = randn(s.heads);
    std::vector<int32_t> count(n), idx(n * s.top_k);
    for (int64_t i = 0; i < n; ++i) {
      count[i] = std::max(0, std::min(s.n_comp_rows, s.top_k) - static_cast<int32_t>(3 * i));
      for (int32_t j = 0; j < count[i]; ++j) idx[i * s.top_k + j] = (j * 29 + static_cast<int32_t>(i)) % s.n_comp_rows;
    }
    for (bool selected : {false, true}) {
      AttentionArgs a;
      a.q = q.data();
      a.pos = pos.data();
      a.n = n;
      a.heads = s.heads;
      a.head_dim = s.D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
      a.sinks = sinks.data();
      a.raw = raw[0].data();
      a.raw_cap = cap;
      a.window = s.window;
      a.comp = comp[0].data();
      a.comp_count = count.data();
      a.comp_idx = selected ? idx.data() : nullptr;
      a.comp_idx_stride = s.top_k;
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
      gpu_->attention(g);
      ASSERT_TRUE(gpu_->sync().ok());
      expect_close(host(g.out, want.size()), want, 1e-5, 1e-7,
                   "attention per-query sessions H" + std::to_string(s.heads) + " D" + std::to_string(s.D) +
                       (selected ? " selected" : ""));
    }
  }
}

TEST_F(CudaBatchOps, IndexerPerQueryRowsExact) {
  const int32_t heads = 8, hd = 128, top_k = 16;
  const std::vector<int32_t> rows_of = {60, 25, 90};  // rows held by each of three sessions
  const std::vector<int> sess = {0, 0, 1, 2, 2};
  const int64_t n = static_cast<int64_t>(sess.size());
  std::vector<std::vector<float>> rows;
  std::vector<const float*> gsess;
  for (int32_t r : rows_of) {
    rows.push_back(randn(static_cast<size_t>(r * hd)));
    gsess.push_back(dev(rows.back()));
  }
  std::vector<const float*> rows_at, grows_at;
  std::vector<int32_t> nr;
  for (int64_t i = 0; i < n; ++i) {
    rows_at.push_back(rows[sess[i]].data());
    grows_at.push_back(gsess[sess[i]]);
    nr.push_back(rows_of[sess[i]] - static_cast<int32_t>(i % 2));
  }
  nr[2] = top_k;  // the no-scoring path inside a scoring batch
  auto q = randn(static_cast<size_t>(n * heads * hd));
  auto w = randn(static_cast<size_t>(n * heads));
  std::vector<int32_t> idx(n * top_k, -7), cnt(n, -7);
  IndexerArgs a{q.data(), w.data(), rows[0].data(), nr.data(), n, heads, hd, top_k, idx.data(), cnt.data()};
  a.rows_at = rows_at.data();
  cpu_->indexer(a);
  int32_t* gidx = poisoned_i32(idx.size());
  int32_t* gcnt = poisoned_i32(cnt.size());
  IndexerArgs g{dev(q), dev(w), gsess[0], dev(nr), n, heads, hd, top_k, gidx, gcnt};
  g.rows_at = dev(grows_at);
  gpu_->indexer(g);
  ASSERT_TRUE(gpu_->sync().ok());
  const auto hi = host(gidx, idx.size());
  const auto hc = host(gcnt, cnt.size());
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hc[i], cnt[i]) << "query " << i;
    for (int32_t j = 0; j < cnt[i]; ++j) mismatches += hi[i * top_k + j] != idx[i * top_k + j];
  }
  EXPECT_EQ(mismatches, 0);
  std::printf("PARITY %-44s n=%-9d selected ids differing: %lld  %s\n", "indexer per-query session rows",
              top_k * static_cast<int>(n), static_cast<long long>(mismatches), mismatches ? "FAIL" : "ok");
}

// A batched step's compressor call (CompressorArgs::segments): three sessions with their own frontier
// rings, positions and output rows in one launch, vs the CPU op with the same table. Pooling to 1e-5
// relative (as test_cuda_ops.cpp), positions and the updated frontiers exactly.
TEST_F(CudaBatchOps, CompressorSegments) {
  struct S {
    int32_t D, ratio;
    bool overlap;
  };
  for (S s : {S{512, 4, true}, S{512, 128, false}, S{128, 4, true}}) {
    const int64_t width = s.overlap ? 2 * s.D : s.D;
    const int32_t slots = (s.overlap ? 2 : 1) * s.ratio + 64;
    const int32_t slot_rows = ((slots + s.ratio - 1) / s.ratio) * s.ratio;
    // Session 0 decodes the token closing a block, session 1 prefills 40 tokens, session 2 decodes mid-block.
    const std::vector<int32_t> pos0 = {2 * s.ratio - 1, 5, s.ratio + 1}, n = {1, 40, 1};
    int64_t cols = 0;
    for (int32_t k : n) cols += k;
    auto kv = randn(static_cast<size_t>(cols * width)), sc = randn(static_cast<size_t>(cols * width));
    auto ape = randn(static_cast<size_t>(s.ratio * width));
    std::vector<std::vector<float>> skv, ssc, out;
    std::vector<std::vector<int32_t>> opos;
    std::vector<CompressorSegment> cseg, gseg;
    std::vector<float*> gout;
    std::vector<int32_t*> gpos;
    int64_t col = 0;
    for (int k = 0; k < 3; ++k) {
      skv.push_back(randn(static_cast<size_t>(slot_rows * width)));
      ssc.push_back(randn(static_cast<size_t>(slot_rows * width)));
      const int64_t rows = (pos0[k] + n[k]) / s.ratio - pos0[k] / s.ratio;
      out.push_back(std::vector<float>(static_cast<size_t>(std::max<int64_t>(1, rows) * s.D), NAN));
      opos.push_back(std::vector<int32_t>(static_cast<size_t>(std::max<int64_t>(1, rows)), -1));
      cseg.push_back({col, n[k], pos0[k], skv[k].data(), ssc[k].data(), out[k].data(), opos[k].data()});
      gout.push_back(poisoned(out[k].size()));
      gpos.push_back(poisoned_i32(opos[k].size()));
      gseg.push_back({col, n[k], pos0[k], dev(skv[k]), dev(ssc[k]), gout[k], gpos[k]});
      col += n[k];
    }
    CompressorArgs a;
    a.kv = kv.data();
    a.score = sc.data();
    a.ape = ape.data();
    a.ratio = s.ratio;
    a.out_dim = s.D;
    a.overlap = s.overlap;
    a.slots = slot_rows;
    a.segments = 3;
    a.seg = cseg.data();
    cpu_->compressor(a);
    CompressorArgs g = a;
    g.kv = dev(kv);
    g.score = dev(sc);
    g.ape = dev(ape);
    g.seg = dev(gseg);
    gpu_->compressor(g);
    ASSERT_TRUE(gpu_->sync().ok());
    for (int k = 0; k < 3; ++k) {
      const std::string what = "compressor segments D" + std::to_string(s.D) + " r" + std::to_string(s.ratio) +
                               " session " + std::to_string(k);
      expect_close(host(gout[k], out[k].size()), out[k], 1e-5, 1e-7, what);
      const int64_t rows = (pos0[k] + n[k]) / s.ratio - pos0[k] / s.ratio;
      const auto hp = host(gpos[k], opos[k].size());
      for (int64_t j = 0; j < rows; ++j) EXPECT_EQ(hp[j], opos[k][j]) << what;
      EXPECT_EQ(host(gseg[k].state_kv, skv[k].size()), skv[k]) << what;
    }
  }
}

// compressor_many (CudaBackendOptions::small_v4: a CSA layer's attention and indexer compressors in one
// launch) bit for bit one compressor() call per job on copies of the same frontiers: pooled rows,
// positions, both frontier rings, and (one session) the host row counts. Batched calls (three sessions
// as above, D512 and D128, ratio 4 with overlap, and ratio 128 without beside ratio 4) and one session's
// decode-sized calls (1 and 7 tokens: the single walking block).
TEST_F(CudaBatchOps, CompressorManyEqualsOneCallPerJob) {
  struct J {
    int32_t D, ratio;
    bool overlap;
  };
  struct Dev {  // one job's device buffers, twice: [0] for compressor_many, [1] for compressor()
    CompressorArgs a[2];
    std::vector<float*> out[2], skv[2], ssc[2];
    std::vector<int32_t*> pos[2];
    std::vector<int64_t> out_len, ring_len, rows;
  };
  auto make = [&](J j, bool batched, int32_t tokens) {
    Dev d;
    const int64_t width = j.overlap ? 2 * j.D : j.D;
    const int32_t slots = ((j.overlap ? 2 : 1) * j.ratio + 64 + j.ratio - 1) / j.ratio * j.ratio;
    const std::vector<int32_t> pos0 = batched ? std::vector<int32_t>{2 * j.ratio - 1, 5, j.ratio + 1}
                                              : std::vector<int32_t>{3 * j.ratio - 1};
    const std::vector<int32_t> n = batched ? std::vector<int32_t>{1, 40, 1} : std::vector<int32_t>{tokens};
    int64_t cols = 0;
    for (int32_t k : n) cols += k;
    const auto kv = randn(static_cast<size_t>(cols * width)), sc = randn(static_cast<size_t>(cols * width));
    const auto ape = randn(static_cast<size_t>(j.ratio * width));
    std::vector<std::vector<float>> skv, ssc;
    for (size_t k = 0; k < n.size(); ++k) {
      skv.push_back(randn(static_cast<size_t>(slots * width)));
      ssc.push_back(randn(static_cast<size_t>(slots * width)));
      d.rows.push_back(std::max<int64_t>(1, (pos0[k] + n[k]) / j.ratio - pos0[k] / j.ratio));
      d.out_len.push_back(d.rows.back() * j.D);
      d.ring_len.push_back(slots * width);
    }
    for (int c = 0; c < 2; ++c) {
      CompressorArgs& a = d.a[c];
      a.kv = dev(kv);
      a.score = dev(sc);
      a.ape = dev(ape);
      a.ratio = j.ratio;
      a.out_dim = j.D;
      a.overlap = j.overlap;
      a.slots = slots;
      std::vector<CompressorSegment> seg;
      int64_t col = 0;
      for (size_t k = 0; k < n.size(); ++k) {
        d.out[c].push_back(poisoned(static_cast<size_t>(d.out_len[k])));
        d.pos[c].push_back(poisoned_i32(static_cast<size_t>(d.rows[k])));
        d.skv[c].push_back(dev(skv[k]));
        d.ssc[c].push_back(dev(ssc[k]));
        seg.push_back({col, n[k], pos0[k], d.skv[c][k], d.ssc[c][k], d.out[c][k], d.pos[c][k]});
        col += n[k];
      }
      if (batched) {
        a.segments = static_cast<int32_t>(seg.size());
        a.seg = dev(seg);
      } else {
        a.n = n[0];
        a.pos0 = pos0[0];
        a.state_kv = d.skv[c][0];
        a.state_score = d.ssc[c][0];
        a.out = d.out[c][0];
        a.out_pos = d.pos[c][0];
      }
    }
    return d;
  };
  struct Case {
    J j0, j1;
    bool batched;
    int32_t tokens;
  };
  for (Case cs : {Case{{512, 4, true}, {128, 4, true}, true, 0}, Case{{512, 128, false}, {128, 4, true}, true, 0},
                  Case{{512, 4, true}, {128, 4, true}, false, 1}, Case{{512, 4, true}, {128, 4, true}, false, 7}}) {
    Dev d0 = make(cs.j0, cs.batched, cs.tokens), d1 = make(cs.j1, cs.batched, cs.tokens);
    int64_t emitted_many[2] = {-1, -1}, emitted_one[2] = {-1, -1};
    CompressorArgs many[2] = {d0.a[0], d1.a[0]};
    if (!cs.batched) {
      many[0].n_out = &emitted_many[0];
      many[1].n_out = &emitted_many[1];
      d0.a[1].n_out = &emitted_one[0];
      d1.a[1].n_out = &emitted_one[1];
    }
    ASSERT_TRUE(gpu_->sync().ok());
    gpu_->compressor_many(many);
    gpu_->compressor(d0.a[1]);
    gpu_->compressor(d1.a[1]);
    ASSERT_TRUE(gpu_->sync().ok());
    const std::string tag = std::string("compressor_many ") + (cs.batched ? "3 sessions" : "1 session n") +
                            (cs.batched ? "" : std::to_string(cs.tokens)) + " D" + std::to_string(cs.j0.D) + " r" +
                            std::to_string(cs.j0.ratio) + " + D" + std::to_string(cs.j1.D);
    if (!cs.batched) {
      EXPECT_EQ(emitted_many[0], emitted_one[0]) << tag;
      EXPECT_EQ(emitted_many[1], emitted_one[1]) << tag;
    }
    int bad = 0;
    for (const Dev* d : {&d0, &d1})
      for (size_t k = 0; k < d->rows.size(); ++k) {
        // bits (rows a call leaves alone keep the poison, NaN, in both copies)
        const auto a = host(d->out[0][k], d->out_len[k]), b = host(d->out[1][k], d->out_len[k]);
        bad += std::memcmp(a.data(), b.data(), a.size() * 4) != 0 ? 1 : 0;
        bad += host(d->pos[0][k], d->rows[k]) != host(d->pos[1][k], d->rows[k]) ? 1 : 0;
        const auto ka = host(d->skv[0][k], d->ring_len[k]), kb = host(d->skv[1][k], d->ring_len[k]);
        const auto sa = host(d->ssc[0][k], d->ring_len[k]), sb = host(d->ssc[1][k], d->ring_len[k]);
        bad += std::memcmp(ka.data(), kb.data(), ka.size() * 4) != 0 ? 1 : 0;
        bad += std::memcmp(sa.data(), sb.data(), sa.size() * 4) != 0 ? 1 : 0;
      }
    EXPECT_EQ(bad, 0) << tag;
    std::printf("PARITY %-44s rows, positions, rings bit for bit: %s\n", tag.c_str(), bad ? "FAIL" : "ok");
  }
}
