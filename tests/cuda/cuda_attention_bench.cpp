// cuda_attention_bench.cpp — attention and the decode indexer at the Flash shapes, each with the current
// kernels and the previous ones (issue 5: a decode step's attention per layer and its CSA indexer, a
// prefill chunk's attention), host-timed (bench_median.h) and, run under ncu, one kernel set per mode.
//   attention  H 64 × D 512, window 128; CSA: 128 raw + 512 selected rows (2K: every compressed row; 32K:
//              512 of 8,192, spread); HCA: 128 raw + ctx/128 compressed rows; n = 1 (decode), 8 and 32
//              (batched decode steps: the split shape), 2,048 (a prefill chunk, positions ctx … ctx + 2,047).
//   indexer    64 heads × 128, top 512; decode at 2K (525 rows, the forward pass's bucketed bound 1,024)
//              and 32K (8,192 rows), n = 1 and 8.
// Variants: "now" (defaults), "prev" (attention_mma_kernels = 0, attention_merge_sliced = false,
// indexer_select = 0: the kernels before this file), "k1/sel2" (the fast attention kernels, sliced merge;
// the fused decode indexer), "sel1" (the select in its own launch), "k3" (chunk and split kernels with
// the softmax once per block; the prefill indexer on int8 tensor cores), "sel3" (the fused decode
// indexer with q and w loaded before the row count), "sel4" (sel3 with the radix select's lean end),
// "k10" / "k9" (kernel 3's chunk loop on 32-bit counters, the default / on int64, the previous one), "sel5" (the
// wide decode indexer — scores, a global histogram of the keys' top bits, the last block's select — at every row
// count), "sel6" (sel4 up to 2,048 rows, the wide kernel above), "sel7" / "sel8" (sel5 / sel6 with fused dot steps
// where exact: the FP4 operands the decode indexer lines use, q and rows through indexer_qat as the model makes them),
// "sel9" … "sel12" (sel5, sel7, sel6, sel8 with the register-blocked tile where a block has 32 or 64 rows), "k14" (the
// chunk kernel with each warp's segments pipelined: a segment's values, the next one's softmax and the one after's scores
// between the same barriers; rows staged per warp, 16 lanes per row), "k18" (k14 with 8 lanes a row, two copies a lane),
// "k25" / "k26" (k10 / k18 with q staged through shared memory by coalesced 16-byte copies and the exactness decision's
// checks as independent chains), "k32" (k26 forming a query's last segment only over its n-tiles and k-steps holding rows), "k34" (k32 with each
// interval's row copies issued a row source at a time between the score k-steps).
// Usage: cuda_attention_bench [all | decode | prefill | idx | idx-once] [variant,variant…]. "decode" and "prefill" run
// each variant's calls 5 times (n = 1 CSA/HCA at 2K, and the indexer) or once (one CSA and one HCA chunk of 2,048), for
// ncu. "idx": only the decode indexer, timed, at 2K (525 rows, bound 1,024), 8K, 16K and 32K (ctx / 4 rows), n = 1
// and 8; "idx-once": the same at n = 1, 3 untimed calls each (ncu). "idx-eq", "idx-few" (and "-once"): the same with
// tie-heavy scores — q and w zero, every score 0 (the benchmark file's: its indexer weights are zero), or the rows
// 64 distinct ones repeated (64 score values, ~128 rows each at 32K: the top 512 ends inside a run of ties).
// "sel13" / "sel14" / "sel17" / "sel18": the wide kernel with the tile by asynchronous copies / also 32-row blocks two per
// SM (the engine's) / also the selects' all-equal checks / also 40 keys a thread up to 10,240 rows.
// Prints "ABENCH" lines. Deliberately not here: correctness (tests/cuda/test_cuda_attention.cpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bench_median.h"
#include "quant/half.h"

using namespace ds4;
using namespace ds4::backend;

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each ABENCH line out as soon as it is measured
  std::string mode = argc > 1 ? argv[1] : "all";
  std::string ties;  // "eq" / "few": the decode indexer's tie-heavy inputs
  for (const char* t : {"eq", "few"})
    if (mode == std::string("idx-") + t || mode == std::string("idx-") + t + "-once") {
      ties = t;
      mode = mode.size() > 8 && mode.substr(mode.size() - 5) == "-once" ? "idx-once" : "idx";
    }
  if (mode != "all" && mode != "decode" && mode != "prefill" && mode != "idx" && mode != "idx-once") {
    std::fprintf(stderr, "usage: cuda_attention_bench [all | decode | prefill | idx[-eq|-few][-once]] [variant,variant...]\n");
    return 2;
  }
  struct Variant {
    const char* name;
    cuda::CudaBackendOptions o;
  };
  std::vector<Variant> vars(7);
  vars[0].name = "now";
  vars[1].name = "prev";  // the kernels before this file: previous MMA kernels, chunk-kernel merge, select 0
  vars[1].o.attention_mma_kernels = 0;
  vars[1].o.attention_merge_sliced = false;
  vars[1].o.indexer_select = 0;
  vars[2].name = "k1/sel2";  // 8-warp fast kernels, sliced merge; the fused decode indexer
  vars[2].o.attention_mma_kernels = 1;
  vars[2].o.indexer_select = 2;
  vars[3].name = "sel1";  // the default attention; the scan select in its own launch
  vars[3].o.indexer_select = 1;
  vars[4].name = "k3";  // the chunk shape with the softmax once per block (attention_mma_chunk.cu); the
  vars[4].o.attention_mma_kernels = 3;  // prefill indexer on int8 tensor cores (indexer_mma.cu)
  vars[4].o.indexer_mma = true;
  vars[5].name = "sel3";  // the default attention; the fused decode indexer with q and w loaded first
  vars[5].o.indexer_select = 3;
  vars[6].name = "sel4";  // sel3 with the radix select's lean end and one-scan compaction
  vars[6].o.indexer_select = 4;
  vars.push_back({"k10", {}});  // kernel 3's chunk kernel with its segment loop on 32-bit counters
  vars.back().o.attention_mma_kernels = 10;
  vars.push_back({"k9", {}});  // kernel 3's chunk kernel with its previous int64 segment loop
  vars.back().o.attention_mma_kernels = 9;
  vars.push_back({"sel5", {}});  // the wide decode indexer at every row count
  vars.back().o.indexer_select = 5;
  vars.push_back({"sel6", {}});  // sel4 up to 2,048 rows, the wide decode indexer above
  vars.back().o.indexer_select = 6;
  vars.push_back({"sel7", {}});  // sel5 with fused dot steps where exact
  vars.back().o.indexer_select = 7;
  vars.push_back({"sel8", {}});  // sel6 with fused dot steps where exact
  vars.back().o.indexer_select = 8;
  for (int sel : {9, 10, 11, 12}) {  // sel5, sel7, sel6, sel8 with the register-blocked tile
    static const char* const names[] = {"sel9", "sel10", "sel11", "sel12"};
    vars.push_back({names[sel - 9], {}});
    vars.back().o.indexer_select = sel;
  }
  for (int sel : {13, 14, 17, 18}) {  // the tile by cp.async; also 32-row blocks two per SM; also the all-equal check;
                                      // also 40 keys a thread up to 10,240 rows
    static const char* const names[] = {"sel13", "sel14", "sel17", "sel18"};
    vars.push_back({names[sel == 13 ? 0 : sel == 14 ? 1 : sel == 17 ? 2 : 3], {}});
    vars.back().o.indexer_select = sel;
  }
  vars.push_back({"k14", {}});  // the chunk kernel with each warp's segments pipelined (session 11; the default's from
                                // 384 rows a query, so "k10" is the previous default there)
  vars.back().o.attention_mma_kernels = 14;
  vars.push_back({"k18", {}});  // 14 with its copies 8 lanes a row (session 12; the default's pipelined form now, so
                                // "k14" is the previous default there)
  vars.back().o.attention_mma_kernels = 18;
  vars.push_back({"k25", {}});  // 10 / 18 with q staged through shared memory and the exactness checks as independent
  vars.back().o.attention_mma_kernels = 25;  // chains (session 13; 26 the default's pipelined form since, 25 its loop form)
  vars.push_back({"k26", {}});
  vars.back().o.attention_mma_kernels = 26;
  vars.push_back({"k32", {}});  // 26 forming a query's last segment only over its n-tiles and k-steps holding rows (session 14)
  vars.back().o.attention_mma_kernels = 32;
  vars.push_back({"k34", {}});  // 32 with each interval's row copies spread over the score k-steps (session 14; the default's
  vars.back().o.attention_mma_kernels = 34;  // pipelined form since, so "k26" is the previous default there)
  if (argc > 2) {  // only the variants named in argv[2] (comma-separated), e.g. for one ncu profile
    const std::string want = std::string(",") + argv[2] + ",";
    std::vector<Variant> kept;
    for (const Variant& v : vars)
      if (want.find(std::string(",") + v.name + ",") != std::string::npos) kept.push_back(v);
    if (kept.empty()) {
      std::fprintf(stderr, "cuda_attention_bench: no variant named in %s\n", argv[2]);
      return 2;
    }
    vars = kept;
  }
  std::vector<std::unique_ptr<Backend>> bes;
  for (auto& v : vars) {
    auto made = cuda::make_cuda_backend(v.o);
    if (!made.ok()) {
      std::printf("ABENCH skipped: %s\n", made.status().to_string().c_str());
      return 0;
    }
    bes.push_back(std::move(made).value());
  }
  Backend& be = *bes[0];  // buffers live in be; the other backends use the same device memory
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<Buffer> keep;
  auto fbuf = [&](int64_t n) {
    keep.push_back(std::move(be.alloc(static_cast<uint64_t>(std::max<int64_t>(n, 1)) * 4, MemCategory::scratch)).value());
    return keep.back().f32();
  };
  auto upload = [&](const std::vector<float>& h) {
    float* d = fbuf(static_cast<int64_t>(h.size()));
    be.upload(d, h.data(), h.size() * 4);
    return d;
  };
  auto frand = [&](int64_t n, float sc, bool f16) {
    std::vector<float> h(static_cast<size_t>(n));
    for (auto& v : h) v = f16 ? f16_to_f32(f32_to_f16(sc * nd(rng))) : sc * nd(rng);
    return upload(h);
  };
  auto ibuf = [&](const std::vector<int32_t>& h) {
    int32_t* d = reinterpret_cast<int32_t*>(fbuf(static_cast<int64_t>(h.size())));
    be.upload(d, h.data(), h.size() * 4);
    return d;
  };
  const bool timed = mode == "all" || mode == "idx";
  // Runs body on each variant's backend: timed (median µs per call) or once (for ncu).
  auto each = [&](const std::function<void(Backend&)>& body, int iters) {
    for (size_t v = 0; v < vars.size(); ++v) {
      Backend& b = *bes[v];
      if (!timed) {  // ncu: a few warm calls (the first one sets the kernels' shared-memory limits)
        for (int r = 0; r < (mode == "decode" ? 5 : mode == "idx-once" ? 3 : 1); ++r) body(b);
        (void)b.sync();
        continue;
      }
      const double s = ds4::test::median_seconds([&] { body(b); }, [&] { (void)b.sync(); }, iters);
      std::printf("  %s %8.2f us", vars[v].name, s * 1e6);
    }
    if (timed) std::printf("\n");
  };

  const int H = 64, D = 512, W = 128, TK = 512, IH = 64, ID = 128;
  // q [n][64][128], head weights [n][64] and rows [rows_n][128] (drawn in that order); q and the rows as the model
  // makes them: FP4 round trips (the rows also through f16).
  auto fp4_inputs = [&](int64_t n, int64_t rows_n, float*& iq, float*& iw, float*& irows) {
    iq = frand(n * IH * ID, 1.0f, false);
    iw = frand(n * IH, 0.1f, false);
    irows = frand(rows_n * ID, 1.0f, false);
    be.indexer_qat({iq, n * IH, ID});
    IndexerQatArgs rq{irows, rows_n, ID};
    rq.f16 = true;
    be.indexer_qat(rq);
  };
  // Decode indexer at ctx: 2K → 525 rows under the forward pass's bucketed bound (1,024); else ctx / 4 rows (bound the
  // same: 32K's 8,192 is its own bucket); fp4_inputs.
  // bound_at (> 0): that bound instead (the 32K decode step's is 10,240: 64 keys a thread in the wide select).
  auto decode_indexer = [&](int64_t ctx, int64_t n, int64_t bound_at = 0) {
    const int32_t rows_n = static_cast<int32_t>(ctx == 2048 ? 525 : ctx / 4);
    const int64_t bound = bound_at > 0 ? bound_at : ctx == 2048 ? 1024 : ctx / 4;
    float *iq = nullptr, *iw = nullptr, *irows = nullptr;
    fp4_inputs(n, bound, iq, iw, irows);
    if (ties == "eq") {  // every score 0
      iq = upload(std::vector<float>(static_cast<size_t>(n * IH * ID), 0.0f));
      iw = upload(std::vector<float>(static_cast<size_t>(n * IH), 0.0f));
    } else if (ties == "few") {  // row r = row r % 64
      std::vector<float> h(static_cast<size_t>(bound * ID));
      be.download(h.data(), irows, h.size() * 4);
      for (int64_t r = 64; r < bound; ++r)
        std::copy_n(h.begin() + (r % 64) * ID, ID, h.begin() + r * ID);
      irows = upload(h);
    }
    (void)be.sync();
    int32_t* nr = ibuf(std::vector<int32_t>(n, rows_n));
    int32_t* oidx = reinterpret_cast<int32_t*>(fbuf(n * TK));
    int32_t* ocnt = reinterpret_cast<int32_t*>(fbuf(n));
    IndexerArgs ia{iq, iw, irows, nr, n, IH, ID, TK, oidx, ocnt};
    ia.max_rows = bound;
    if (timed)
      std::printf("ABENCH indexer%-4s top512 ctx=%-3lldK n=%-5lld rows=%-5d bound=%-5lld", ties.c_str(),
                  static_cast<long long>(ctx / 1024), static_cast<long long>(n), rows_n, static_cast<long long>(bound));
    each([&](Backend& b) { b.indexer(ia); }, 50);
  };
  if (mode == "idx" || mode == "idx-once") {
    for (int64_t ctx : {int64_t{2048}, int64_t{8192}, int64_t{16384}, int64_t{32768}})
      for (int64_t n : {int64_t{1}, int64_t{8}})
        if (timed || n == 1) decode_indexer(ctx, n);
    decode_indexer(32768, 1, 10240);  // the 32K step's bound
    return 0;
  }
  const int64_t nmax = mode == "decode" ? 32 : 2048;  // decode (ncu): no chunk-sized buffers to fill
  float* q = frand(nmax * H * D, 0.2f, false);
  float* out = fbuf(nmax * H * D);
  float* sinks = frand(H, 1.0f, false);
  const int64_t cap = W + nmax;
  float* raw = frand(cap * D, 1.0f, true);  // rows as the KV cache holds them (f16-rounded)
  float* comp = frand(int64_t{8192} * D, 1.0f, true);

  std::vector<int64_t> ns = {1, 8, 32, nmax};
  if (mode == "decode") ns = {1};
  if (mode == "prefill") ns = {nmax};
  for (int64_t ctx : {int64_t{2048}, int64_t{32768}}) {
    if (!timed && ctx != 2048) continue;
    const char* cn = ctx == 2048 ? "2K" : "32K";
    for (int64_t n : ns) {
      std::vector<int32_t> pos(n), csa_cnt(n, TK), hca_cnt(n), idx(n * TK);
      const int64_t comp_rows = ctx / 4;
      for (int64_t i = 0; i < n; ++i) {
        pos[i] = static_cast<int32_t>(ctx + i);
        hca_cnt[i] = (pos[i] + 1) / 128;
        for (int j = 0; j < TK; ++j)  // sorted, distinct, spread over the compressed rows
          idx[i * TK + j] = comp_rows <= TK ? j : static_cast<int32_t>(j * (comp_rows / TK) + (i * 7 + j * 13) % (comp_rows / TK));
      }
      int32_t *dpos = ibuf(pos), *dcsa = ibuf(csa_cnt), *dhca = ibuf(hca_cnt), *didx = ibuf(idx);
      for (bool csa : {true, false}) {
        AttentionArgs a;
        a.q = q;
        a.pos = dpos;
        a.n = n;
        a.heads = H;
        a.head_dim = D;
        a.scale = 0.044f;
        a.sinks = sinks;
        a.raw = raw;
        a.raw_cap = cap;
        a.window = W;
        a.comp = comp;
        a.comp_count = csa ? dcsa : dhca;
        a.comp_idx = csa ? didx : nullptr;
        a.comp_idx_stride = TK;
        a.max_comp = csa ? TK : (ctx + n) / 128;
        a.out = out;
        if (timed)
          std::printf("ABENCH attention %-3s ctx=%-3s n=%-5lld rows=%-4lld", csa ? "CSA" : "HCA", cn,
                      static_cast<long long>(n), static_cast<long long>(W + (csa ? TK : (ctx + n) / 128)));
        each([&](Backend& b) { b.attention(a); }, n > 32 ? 3 : 50);
      }
    }
    if (ctx == 2048 && mode != "decode") {  // a prefill chunk's indexer: 2,048 queries at 2K (512 … 1,023 rows), FP4 operands
      const int64_t n = nmax, rows_n = (ctx + n) / 4;
      float *iq = nullptr, *iw = nullptr, *irows = nullptr;
      fp4_inputs(n, rows_n, iq, iw, irows);
      std::vector<int32_t> nrs(n);
      for (int64_t i = 0; i < n; ++i) nrs[i] = static_cast<int32_t>((ctx + i + 1) / 4);
      int32_t* nr = ibuf(nrs);
      int32_t* oidx = reinterpret_cast<int32_t*>(fbuf(n * TK));
      int32_t* ocnt = reinterpret_cast<int32_t*>(fbuf(n));
      IndexerArgs ia{iq, iw, irows, nr, n, IH, ID, TK, oidx, ocnt};
      ia.max_rows = (rows_n + 127) / 128 * 128;
      (void)be.sync();
      if (timed)
        std::printf("ABENCH indexer   top512 ctx=%-3s n=%-5lld rows=%-5lld", cn, static_cast<long long>(n),
                    static_cast<long long>(rows_n));
      each([&](Backend& b) { b.indexer(ia); }, 3);
    }
    if (mode == "prefill") continue;
    for (int64_t n : {int64_t{1}, int64_t{8}})
      if (timed || n == 1) decode_indexer(ctx, n);
  }
  return 0;
}
