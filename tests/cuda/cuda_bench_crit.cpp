// cuda_bench_crit.cpp — `cuda_bench --crit [SIDE …] [--rounds R] [--steps S] M.gguf …`: where a decode step's time
// is on its critical path, and `cuda_bench --opt-swap FIELD A B [C …] [--rounds R] M.gguf …`: backend option
// values against each other on whole decode steps (the generic form of --moe-swap / --hcb-swap).
//
// Decode steps of one session at 2K as the engine runs them (runtime::engine_cuda_options, step graphs with PDL,
// branches with the HC split on the side lane), on ONE backend and one copy of the weights. Each SIDE is one
// model::Forward over its own crit_backend.h wrapper, with:
//   full                 nothing removed
//   -STAGE[,-STAGE …]    those stages' calls dropped (crit_backend.h lists them: shared, experts, router, comp,
//                        indexer, hcsplit, kv, q, attn, out, hcpost, boundary, head)
//   FIELD=V[,…]          backend option values (kFields below), set before each of the side's steps; a field one
//                        side names is set on every side: to the first side's value, or the engine's value where
//                        the first side does not name it (fields without a known engine value must be named there)
// (items of both kinds may be mixed in one side: `-shared,attention_mma_kernels=31`). Without sides: full, each
// stage removed in turn, full again (the floor: the same kernels on two Forwards).
//
// All sides share one KV state, prefilled once (2,048 tokens, 512-token chunks); every side's run is the same S
// decode steps at positions 2,048 … 2,048 + S − 1 with the same tokens, after the compressor frontier rings are put
// back to their state after the prefill (the only state those steps read that earlier runs wrote; the raw ring and
// compressed rows they read are the prefill's or written by the run itself first) — so each run starts alike and
// sides that remove nothing give the same logits (PARITY lines; --opt-swap's contract check). Per side, before
// timing: one priming run (every call made, eagerly: the side's scratch then holds real values, which its removed
// ops leave in place — the indexer's selected rows, the router's ids), then two runs that record its step graphs.
// Each round then times one run per side (host-timed around the steps; odd rounds in reverse order so no side
// always follows the same neighbour) and prints per-round differences from the first side.
//
// A removed stage's time saved is its share of the critical path: compare it with the stage's time alone (the
// stage table, gpu_check.sh): a stage saving ≪ its own time runs beside other work (the side lane, or PDL
// overlap). LOGITS OF A SIDE WITH A STAGE REMOVED ARE WRONG ON PURPOSE: only its time means anything.
// Deliberately not here: the wrapper (crit_backend.h), op-alone timings (cuda_bench --stages).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/dense_ramp.h"
#include "crit_backend.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/weights.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"
#include "runtime/engine_cuda_options.h"

using namespace ds4;
using backend::cuda::CudaBackend;
using backend::cuda::CudaBackendOptions;
using ds4::test::CritBackend;
using ds4::test::CritStage;

namespace {

// Options a side may set. `engine` gives the engine's value as the setter takes it (nullopt: the option's engine
// value is resolved inside make_cuda_backend, so a run naming the field must name it on its first side).
struct Field {
  const char* name;
  std::optional<int> (*engine)(const CudaBackendOptions&);
};
// ramp_off=B: l2_prefetch_mode with dense_ramp.h's default bits less B (e.g. 524288 = kRampHalfRows16) — the
// "previous value" of a ramp bit that became a default. It sets the same backend field as l2_prefetch_mode.
constexpr Field kFields[] = {
    {"l2_prefetch_mode", [](const CudaBackendOptions& o) -> std::optional<int> { return o.l2_prefetch_mode; }},
    {"attention_mma_kernels", [](const CudaBackendOptions& o) -> std::optional<int> { return o.attention_mma_kernels; }},
    {"indexer_select", [](const CudaBackendOptions& o) -> std::optional<int> { return o.indexer_select; }},
    {"expert_one_token", [](const CudaBackendOptions& o) -> std::optional<int> { return o.expert_one_token; }},
    {"expert_row_tiles_v3", [](const CudaBackendOptions& o) -> std::optional<int> { return o.expert_row_tiles_v3; }},
    {"expert_tiles_pdl", [](const CudaBackendOptions& o) -> std::optional<int> { return o.expert_tiles_pdl; }},
    {"gemv_warp_tile_bytes", [](const CudaBackendOptions& o) -> std::optional<int> { return o.gemv_warp_tile_bytes; }},
    {"hc_post_fold", [](const CudaBackendOptions&) -> std::optional<int> { return std::nullopt; }},
    {"hc_fuse", [](const CudaBackendOptions&) -> std::optional<int> { return std::nullopt; }},
    {"small_v6", [](const CudaBackendOptions&) -> std::optional<int> { return std::nullopt; }},
    {"attn_out_rope", [](const CudaBackendOptions&) -> std::optional<int> { return std::nullopt; }},
};
constexpr int kNumFields = static_cast<int>(sizeof(kFields) / sizeof(kFields[0]));

int field_of(std::string_view name) {
  for (int f = 0; f < kNumFields; ++f)
    if (name == kFields[f].name) return f;
  return -1;
}

struct Side {
  std::string label;
  uint32_t removed = 0;            // crit_bit(stage) bits
  std::vector<std::optional<int>> opt = std::vector<std::optional<int>>(kNumFields);  // fields it names
};

// One side from its text; false (with a message) on an unknown item.
bool parse_side(const std::string& text, const CudaBackendOptions& co, Side& s) {
  s.label = text;
  if (text == "full") return true;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    if (item[0] == '-') {
      const CritStage st = ds4::test::crit_stage_of(std::string_view(item).substr(1));
      if (st == CritStage::count) {
        std::printf("BENCH crit: no stage '%s'\n", item.c_str() + 1);
        return false;
      }
      s.removed |= ds4::test::crit_bit(st);
      continue;
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      std::printf("BENCH crit: side item '%s' is neither -STAGE nor FIELD=V\n", item.c_str());
      return false;
    }
    std::string name = item.substr(0, eq);
    char* e = nullptr;
    long v = std::strtol(item.c_str() + eq + 1, &e, 10);
    if (e == item.c_str() + eq + 1 || *e != '\0') {
      std::printf("BENCH crit: '%s' has no integer value\n", item.c_str());
      return false;
    }
    if (name == "ramp_off") {  // dense_ramp.h's default ramp bits less v, as an explicit l2_prefetch_mode
      namespace cu = backend::cuda;
      v = (co.l2_prefetch_mode & cu::kL2PrefetchModeMask) | cu::kRampExplicit | (cu::kRampDefault & ~static_cast<int>(v));
      name = "l2_prefetch_mode";
    }
    const int f = field_of(name);
    if (f < 0) {
      std::printf("BENCH crit: no option field '%s' (l2_prefetch_mode, ramp_off, attention_mma_kernels, …)\n", name.c_str());
      return false;
    }
    s.opt[static_cast<size_t>(f)] = static_cast<int>(v);
  }
  return true;
}

// Sets every field some side names to side k's value (its own, else the first side's, else the engine's).
void apply_options(CudaBackend& be, const CudaBackendOptions& co, const std::vector<Side>& sides, size_t k) {
  std::vector<std::optional<int>> v(kNumFields);
  for (int f = 0; f < kNumFields; ++f) {
    bool named = false;
    for (const Side& s : sides) named = named || s.opt[static_cast<size_t>(f)].has_value();
    if (!named) continue;
    const auto& own = sides[k].opt[static_cast<size_t>(f)];
    const auto& first = sides[0].opt[static_cast<size_t>(f)];
    v[static_cast<size_t>(f)] = own ? own : first ? first : kFields[f].engine(co);
  }
  auto at = [&](const char* n) { return v[static_cast<size_t>(field_of(n))]; };
  if (auto x = at("l2_prefetch_mode")) be.set_l2_prefetch_mode(*x);
  if (at("attention_mma_kernels") || at("indexer_select"))
    be.set_attention_mma_tuning(co.attention_merge_sliced, at("attention_mma_kernels").value_or(co.attention_mma_kernels),
                                at("indexer_select").value_or(co.indexer_select));
  if (auto x = at("expert_one_token")) be.set_expert_one_token(*x);
  if (auto x = at("expert_row_tiles_v3")) be.set_expert_row_tiles_v3(*x);
  if (auto x = at("expert_tiles_pdl")) be.set_expert_tiles_pdl(*x);
  if (auto x = at("gemv_warp_tile_bytes")) be.set_gemv_warp(co.gemv_warp, *x);
  if (auto x = at("hc_post_fold")) be.set_hc_post_fold(*x);
  if (auto x = at("hc_fuse")) be.set_hc_fuse(*x);
  if (auto x = at("small_v6")) be.set_small_v6(*x != 0);
  if (auto x = at("attn_out_rope")) be.set_attn_out_rope(*x != 0);
}

// The compressor frontier rings of every layer (the decode steps' only state read that an earlier run may have
// written), saved after the prefill and put back before each run.
class Frontiers {
 public:
  Status save(backend::Backend& be, model::KvState& kv) {
    for (model::LayerKv& l : kv.layers())
      for (backend::Buffer* b : {&l.comp_kv, &l.comp_score, &l.index_kv, &l.index_score}) {
        if (b->empty()) continue;
        DS4_ASSIGN_OR_RETURN(backend::Buffer copy, be.alloc(b->bytes(), MemCategory::scratch));
        be.copy(copy.data(), b->data(), b->bytes());
        pairs_.push_back({b, std::move(copy)});
      }
    return be.sync();
  }
  void restore(backend::Backend& be) {
    for (auto& [live, saved] : pairs_) be.copy(live->data(), saved.data(), saved.bytes());
  }

 private:
  std::vector<std::pair<backend::Buffer*, backend::Buffer>> pairs_;
};

constexpr int64_t kPrompt = 2048;

// The kernels side k's options pick, launched once (a 2,048-token prefill and 8 decode steps, eagerly) on a throwaway
// backend with those options. A backend raises a kernel's shared-memory limit the first time it launches one of a
// family that shares one flag (gemv_rows.cu's rows_smem_set_: the half kernel's bulk and plain forms), so switching
// options between sides on one backend could launch the second form without its limit (W1: "gemv (q8_0 rows, half):
// invalid argument" on the side with kRampRowsBulk off). The limit belongs to the function, for the whole process:
// raised here once, the bench's backend launches it too. The weights are the bench backend's (one context).
Status launch_side_kernels(CudaBackendOptions co, const std::vector<Side>& sides, size_t k,
                           const modelspec::ModelConfig& cfg, const model::ModelWeights& w) {
  co.max_graphs = 0;  // every step eager, on the step-table path the recorded steps take
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> aux, backend::cuda::make_cuda_backend(co));
  apply_options(*dynamic_cast<CudaBackend*>(aux.get()), co, sides, k);
  model::ForwardOptions fo;
  fo.max_chunk = 512;
  fo.graphs = true;
  fo.branches |= model::kBranchHcSplit;
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<model::Forward> fw, model::Forward::create(*aux, cfg, w, fo));
  DS4_ASSIGN_OR_RETURN(model::KvState kv, fw->new_state(kPrompt + 64));
  const int64_t V = cfg.n_vocab;
  std::vector<int32_t> toks(static_cast<size_t>(kPrompt + 8));
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(V));
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t p = 0; p < kPrompt; p += 512)
    DS4_RETURN_IF_ERROR(fw->eval(kv, std::span<const int32_t>(toks.data() + p, 512), p, logits.data(), false));
  for (int64_t p = kPrompt; p < kPrompt + 8; ++p)
    DS4_RETURN_IF_ERROR(fw->eval(kv, std::span<const int32_t>(toks.data() + p, 1), p, logits.data(), false));
  return aux->sync();
}

// S decode steps at kPrompt … kPrompt + S − 1 (fixed tokens); seconds a step (host-timed), logits of the last;
// < 0 on failure.
double run_steps(model::Forward& fw, backend::Backend& be, model::KvState& kv, Frontiers& fr, int steps,
                 std::vector<float>& logits) {
  using Clock = std::chrono::steady_clock;
  const int64_t V = fw.config().n_vocab;
  logits.assign(static_cast<size_t>(V), 0.0f);
  fr.restore(be);
  if (!be.sync().ok()) return -1;
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    const int32_t tok = static_cast<int32_t>((static_cast<int64_t>(s) * 104729 + 7) % V);
    model::Segment seg{&kv, std::span<const int32_t>(&tok, 1), kPrompt + s, logits.data(), false};
    if (const Status st = fw.eval_batch(std::span<const model::Segment>(&seg, 1)); !st.ok()) {
      std::printf("BENCH crit: decode step %d: %s\n", s, st.to_string().c_str());
      return -1;
    }
  }
  if (!be.sync().ok()) return -1;
  return std::chrono::duration<double>(Clock::now() - t0).count() / steps;
}

// The bench on one file; `tag` names its lines.
void crit_file(const char* path, const std::vector<std::string>& texts, int rounds, int steps, double budget,
               const char* tag) {
  const auto t_start = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  auto file = gguf::File::open(path);
  auto cfg = file.ok() ? modelspec::config_from_gguf(**file) : Result<modelspec::ModelConfig>(file.status());
  if (!cfg.ok()) {
    std::printf("BENCH %s %s: %s\n", tag, path, cfg.status().to_string().c_str());
    return;
  }
  const auto plan = modelspec::layer_plan(*cfg);
  CudaBackendOptions co = runtime::engine_cuda_options();
  std::vector<Side> sides(texts.size());
  for (size_t k = 0; k < texts.size(); ++k)
    if (!parse_side(texts[k], co, sides[k])) return;
  for (int f = 0; f < kNumFields; ++f) {
    bool named = false;
    for (const Side& s : sides) named = named || s.opt[static_cast<size_t>(f)].has_value();
    if (named && !sides[0].opt[static_cast<size_t>(f)] && !kFields[f].engine(co)) {
      std::printf("BENCH %s: the first side must name %s (its engine value is resolved in the backend)\n", tag,
                  kFields[f].name);
      return;
    }
  }
  co.max_graphs = static_cast<int>(16 * sides.size()) + 16;  // ~4–8 keys a side here; none may evict another's
  auto made = backend::cuda::make_cuda_backend(co);
  if (!made.ok()) {
    std::printf("BENCH %s: backend: %s\n", tag, made.status().to_string().c_str());
    return;
  }
  std::unique_ptr<backend::Backend> be = std::move(made).value();
  auto* cbe = dynamic_cast<CudaBackend*>(be.get());
  const auto t_load = std::chrono::steady_clock::now();
  auto bound = model::bind_weights(**file, *cfg, plan, *be);
  if (cbe == nullptr || !bound.ok() || !be->sync().ok()) {
    std::printf("BENCH %s: weights: %s\n", tag, bound.ok() ? "sync failed" : bound.status().to_string().c_str());
    return;
  }
  const model::ModelWeights w = std::move(bound).value();
  std::printf("BENCH %s %s: %zu layers, weights on the device in %.1f s\n", tag, path, plan.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  std::vector<std::unique_ptr<CritBackend>> wraps;
  std::vector<std::unique_ptr<model::Forward>> fws;
  for (size_t k = 0; k < sides.size(); ++k) {
    wraps.push_back(std::make_unique<CritBackend>(*be, w));
    wraps.back()->set_removed(sides[k].removed);
    model::ForwardOptions fo;
    fo.max_chunk = 512;
    fo.graphs = true;
    fo.branches |= model::kBranchHcSplit;
    auto fw = model::Forward::create(*wraps.back(), *cfg, w, fo);
    if (!fw.ok()) {
      std::printf("BENCH %s: forward: %s\n", tag, fw.status().to_string().c_str());
      return;
    }
    fws.push_back(std::move(fw).value());
  }
  // The shared session: a 2,048-token prefill through the first side, everything run (priming).
  auto st = fws[0]->new_state(kPrompt + 4096);
  if (!st.ok()) {
    std::printf("BENCH %s: new_state: %s\n", tag, st.status().to_string().c_str());
    return;
  }
  model::KvState kv = std::move(st).value();
  const int64_t V = cfg->n_vocab;
  {
    apply_options(*cbe, co, sides, 0);
    wraps[0]->set_priming(true);
    std::vector<int32_t> toks(static_cast<size_t>(kPrompt));
    for (size_t k = 0; k < toks.size(); ++k) toks[k] = static_cast<int32_t>((k * 7919 + 13) % static_cast<size_t>(V));
    std::vector<float> logits(static_cast<size_t>(V));
    for (int64_t p = 0; p < kPrompt; p += 512)
      if (const Status es = fws[0]->eval(kv, std::span<const int32_t>(toks.data() + p, 512), p, logits.data(), false);
          !es.ok()) {
        std::printf("BENCH %s: prefill: %s\n", tag, es.to_string().c_str());
        return;
      }
    wraps[0]->set_priming(false);
  }
  Frontiers fr;
  if (const Status s = fr.save(*be, kv); !s.ok()) {
    std::printf("BENCH %s: frontier copies: %s\n", tag, s.to_string().c_str());
    return;
  }
  const auto t_aux = std::chrono::steady_clock::now();
  for (size_t k = 1; k < sides.size(); ++k) {
    bool opts = false;
    for (const auto& o : sides[k].opt) opts = opts || o.has_value();
    if (!opts) continue;
    if (const Status s = launch_side_kernels(co, sides, k, *cfg, w); !s.ok()) {
      std::printf("BENCH %s: side %s on a throwaway backend: %s\n", tag, sides[k].label.c_str(), s.to_string().c_str());
      return;
    }
  }
  std::printf("BENCH %s: option sides' kernels launched on throwaway backends in %.1f s\n", tag,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_aux).count());
  // Per side: priming (real values everywhere; the first side's calls tallied), then two runs that record its step
  // graphs (a key first seen runs eagerly, the second time it is recorded).
  const auto t_prep = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> logits(sides.size());
  for (size_t k = 0; k < sides.size(); ++k) {
    apply_options(*cbe, co, sides, k);
    CritBackend& cb = *wraps[k];
    cb.set_priming(true);
    cb.set_counting(k == 0);
    if (run_steps(*fws[k], *be, kv, fr, steps, logits[k]) < 0) return;
    if (k == 0) {
      cb.set_counting(false);
      std::string tally;
      for (int s = 0; s < ds4::test::kCritStages; ++s)
        tally += std::string(" ") + ds4::test::crit_stage_name(static_cast<CritStage>(s)) + " " +
                 std::to_string(cb.counts()[static_cast<size_t>(s)]);
      std::printf("BENCH %s calls by stage in %d decode steps:%s\n", tag, steps, tally.c_str());
    }
    cb.set_priming(false);
    for (int r = 0; r < 2; ++r)
      if (run_steps(*fws[k], *be, kv, fr, steps, logits[k]) < 0) return;
  }
  std::printf("BENCH %s: %zu sides primed and recorded in %.1f s (%llu graphs kept, %.0f MiB)\n", tag, sides.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_prep).count(),
              static_cast<unsigned long long>(cbe->graphs_kept()), cbe->graph_device_bytes() / 1048576.0);
  std::vector<std::vector<double>> us(sides.size());
  int mismatches = 0, compared = 0;
  const double t_rounds = since_start();
  for (int round = 0; round < rounds; ++round) {
    // --budget: no round is started that would end past it (the summary below always prints).
    const double t_round = since_start();
    if (round > 0 && budget > 0 && t_round + (t_round - t_rounds) / round > budget) {
      std::printf("BENCH %s: --budget %.0f s: stopping after %d rounds\n", tag, budget, round);
      rounds = round;
      break;
    }
    std::string line;
    for (size_t j = 0; j < sides.size(); ++j) {
      const size_t k = round % 2 == 1 ? sides.size() - 1 - j : j;
      apply_options(*cbe, co, sides, k);
      const double t = run_steps(*fws[k], *be, kv, fr, steps, logits[k]);
      if (t < 0) return;
      us[k].push_back(t * 1e6);
    }
    for (size_t k = 0; k < sides.size(); ++k) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s %.1f", sides[k].label.c_str(), us[k].back());
      line += buf;
    }
    std::printf("BENCH %s %zu layers round %d (us a step):%s\n", tag, plan.size(), round + 1, line.c_str());
    // Sides that remove nothing must give the first such side's bits (the same steps from the same state).
    size_t ref = sides.size();
    for (size_t k = 0; k < sides.size(); ++k) {
      if (sides[k].removed != 0) continue;
      if (ref == sides.size()) {
        ref = k;
        continue;
      }
      const bool same = std::memcmp(logits[ref].data(), logits[k].data(), logits[k].size() * sizeof(float)) == 0;
      ++compared;
      mismatches += same ? 0 : 1;
      if (!same)
        std::printf("PARITY %s %s vs %s round %d: logits bit for bit: FAIL\n", tag, sides[k].label.c_str(),
                    sides[ref].label.c_str(), round + 1);
    }
  }
  // Summary: each side's mean, its per-round difference from the first side, that per layer.
  const double L = static_cast<double>(plan.size());
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  std::printf("BENCH %s %zu layers: %d rounds of %d steps a side at 2K, batch 1; first side %s %.1f us a step\n", tag,
              plan.size(), rounds, steps, sides[0].label.c_str(), mean(us[0]));
  for (size_t k = 1; k < sides.size(); ++k) {
    std::vector<double> d;
    int faster = 0;
    std::string per;
    for (int r = 0; r < rounds; ++r) {
      d.push_back(us[k][static_cast<size_t>(r)] - us[0][static_cast<size_t>(r)]);
      faster += d.back() < 0 ? 1 : 0;
      char buf[24];
      std::snprintf(buf, sizeof buf, " %+.1f", d.back());
      per += buf;
    }
    std::vector<double> sorted = d;
    std::sort(sorted.begin(), sorted.end());
    // Non-finite logits after the side's last run: a removed stage can leave values that grow over the layers, and
    // NaNs reach the routing (the experts' ids) — worth knowing when reading that side's time.
    int64_t bad = 0;
    for (float x : logits[k]) bad += std::isfinite(x) ? 0 : 1;
    std::printf("BENCH %s %zuL %-28s %9.1f us | - first:%s | mean %+7.1f median %+7.1f us a step, %+6.2f a layer, "
                "faster in %d of %d | non-finite logits %lld\n",
                tag, plan.size(), sides[k].label.c_str(), mean(us[k]), per.c_str(), mean(d),
                sorted[sorted.size() / 2], mean(d) / L, faster, rounds, static_cast<long long>(bad));
  }
  std::printf("PARITY %s %zu layers: %d comparisons, %d mismatches\n", tag, plan.size(), compared, mismatches);
}

void crit_main(int argc, char** argv, const char* tag, std::vector<std::string> sides) {
  int rounds = 6, steps = 32;
  double budget = 0;
  std::vector<const char*> files;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--budget" && i + 1 < argc) {
      budget = std::atof(argv[++i]);
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (a.size() > 5 && a.compare(a.size() - 5, 5, ".gguf") == 0) {
      files.push_back(argv[i]);
    } else {
      sides.push_back(a);
    }
  }
  if (files.empty()) {
    std::printf("BENCH %s: usage --crit [SIDE ...] [--rounds R] [--steps S] [--budget SECONDS] model.gguf ... (SIDE: "
                "full, -STAGE[,...], FIELD=V[,...]) or --opt-swap FIELD A B [C ...] [same flags] model.gguf ...\n", tag);
    return;
  }
  if (sides.empty()) {
    sides.push_back("full");
    for (int s = 1; s < ds4::test::kCritStages; ++s)
      sides.push_back(std::string("-") + ds4::test::crit_stage_name(static_cast<CritStage>(s)));
    sides.push_back("full");
  }
  for (const char* f : files) crit_file(f, sides, rounds, steps, budget, tag);
}

}  // namespace

void bench_crit(int argc, char** argv) { crit_main(argc, argv, "crit", {}); }

// --opt-swap FIELD A B …: the sides FIELD=A, FIELD=B, … (no stage removed); PARITY lines check their bits.
void bench_opt_swap(int argc, char** argv) {
  if (argc < 3) {
    std::printf("BENCH opt-swap: usage --opt-swap FIELD A B [C ...] [--rounds R] [--steps S] model.gguf ...\n");
    return;
  }
  std::vector<std::string> sides;
  int i = 1;
  for (; i < argc; ++i) {
    char* e = nullptr;
    (void)std::strtol(argv[i], &e, 10);
    if (e == argv[i] || *e != '\0') break;
    sides.push_back(std::string(argv[0]) + "=" + argv[i]);
  }
  crit_main(argc - i, argv + i, "opt-swap", sides);
}
