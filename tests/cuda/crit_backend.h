// crit_backend.h — a what-if backend for measuring where a decode step's time is on its critical path
// (cuda_bench --crit, cuda_bench_crit.cpp): a ForwardingBackend over the CUDA backend that drops the calls of
// the stages it is told to remove and passes every other call on unchanged. Timing whole decode steps with one
// stage removed against the full step shows that stage's critical-path share: a stage whose removal saves much
// less than its own time (the stage table's "ops alone") sits beside the main lane's work on the side lane.
//
// A stage is recognised by its op and, for matmuls and norms, by its weight: the pointers come from the bound
// ModelWeights, so nothing in the forward pass knows about this. Stages (forward.cpp's names; a decode step of
// one token, per layer unless said):
//   shared   the shared expert: matmul_many(sh_gate, sh_up), swiglu, matmul(sh_down)          (side lane)
//   experts  the routed experts: moe                                                            (main lane)
//   router   matmul(router), router                                                             (main lane)
//   comp     compressors: matmul_many of the compressor (+ indexer q, weights) projections, compressor_many /
//            compressors_and_qat, the emitted rows' norm_rope and indexer_qat (CSA / HCA layers)
//   indexer  the indexer's scores + top-k select (indexer op; CSA layers)
//   hcsplit  the HC pre's split + Sinkhorn on the side lane (kBranchHcSplit)
//   kv       KV path: matmul(kv), norm_rope(kv_norm → ring)                                     (side lane)
//   q        query path: matmul(q_a), rms_norm(q_a_norm), matmul(q_b), norm_rope(q)
//   attn     attention
//   out      output projections: matmul(out_a, grouped), matmul(out_b)
//   hcpost   the HC post folded into each hc_pre (the pre then runs alone) and the last layer's post (folded into
//            the head's HC pre, or its own hc_post: the head's flush)
//   boundary every sublayer hc_pre (post + pre) and the last layer's post (as hcpost)
//   head     the output head: its HC (the head-form hc_pre, by_pieces.h hc_pre_head_form, without the post folded
//            in), matmul(output), argmax
// Everything else (embed, copies, fills) is "other" and always runs.
//
// The logits of a step with a stage removed are wrong ON PURPOSE: a removed op leaves its output buffer as it
// was — the values a real step wrote there (cuda_bench_crit.cpp primes every side with real steps first, see
// set_priming), so later reads stay finite and the shapes (e.g. the indexer's 512 selected rows) stay real.
// Only the time means anything on such a side; a side that removes nothing must match the plain backend bit
// for bit (tests/cuda/test_cuda_crit.cpp checks that, and the stage tally, on the CPU backend).
// Deliberately not here: timing and sides (cuda_bench_crit.cpp), any change to what the kept ops compute.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/by_pieces.h"
#include "backend/forwarding_backend.h"
#include "model/weights.h"

namespace ds4::test {

enum class CritStage : int {
  other = 0, shared, experts, router, comp, indexer, hcsplit, kv, q, attn, out, hcpost, boundary, head, count
};
constexpr int kCritStages = static_cast<int>(CritStage::count);

inline const char* crit_stage_name(CritStage s) {
  static constexpr const char* kNames[kCritStages] = {"other", "shared", "experts", "router", "comp",
                                                      "indexer", "hcsplit", "kv", "q", "attn", "out",
                                                      "hcpost", "boundary", "head"};
  const int i = static_cast<int>(s);
  return i >= 0 && i < kCritStages ? kNames[i] : "?";
}

// The stage named `name` (not "other"), or CritStage::count when there is none.
inline CritStage crit_stage_of(std::string_view name) {
  for (int i = 1; i < kCritStages; ++i)
    if (name == crit_stage_name(static_cast<CritStage>(i))) return static_cast<CritStage>(i);
  return CritStage::count;
}

constexpr uint32_t crit_bit(CritStage s) { return 1u << static_cast<int>(s); }

class CritBackend final : public backend::ForwardingBackend {
 public:
  using Backend = backend::Backend;

  CritBackend(Backend& inner, const model::ModelWeights& w) : ForwardingBackend(inner) {
    auto put = [&](const void* p, CritStage s) {
      if (p != nullptr) stage_of_[p] = s;
    };
    for (const model::LayerWeights& l : w.layers) {
      put(l.sh_gate.data, CritStage::shared);
      put(l.sh_up.data, CritStage::shared);
      put(l.sh_down.data, CritStage::shared);
      put(l.router.data, CritStage::router);
      for (const backend::Weight* c : {&l.comp_kv, &l.comp_gate, &l.idx_q_b, &l.idx_proj, &l.idx_comp_kv, &l.idx_comp_gate})
        put(c->data, CritStage::comp);
      put(l.comp_norm, CritStage::comp);
      put(l.idx_comp_norm, CritStage::comp);
      put(l.kv.data, CritStage::kv);
      put(l.kv_norm, CritStage::kv);
      put(l.q_a.data, CritStage::q);
      put(l.q_a_norm, CritStage::q);
      put(l.q_b.data, CritStage::q);
      put(l.out_a.data, CritStage::out);
      put(l.out_b.data, CritStage::out);
    }
    put(w.output_hc_fn.data, CritStage::head);
    put(w.output.data, CritStage::head);
    put(w.output_norm, CritStage::head);
  }

  // Bits crit_bit(stage) of the stages whose calls are dropped (outside priming).
  void set_removed(uint32_t mask) { removed_ = mask; }
  uint32_t removed() const { return removed_; }
  // Priming: every call runs, and graph_begin answers "eager" without asking the inner backend, so the steps run
  // now are neither recorded nor counted as a step key's first sight; they fill this side's scratch with real values.
  void set_priming(bool on) { priming_ = on; }
  // Calls seen per stage (while counting), removed or not.
  void set_counting(bool on) { counting_ = on; }
  void clear_counts() { counts_.fill(0); }
  const std::array<int64_t, kCritStages>& counts() const { return counts_; }

  GraphMode graph_begin(std::span<const int64_t> key) override {
    return priming_ ? GraphMode::eager : in_.graph_begin(key);
  }
  // A branch whose every call is dropped is not made at all (as if its ops did not exist): with stages removed the
  // fork is passed on only before the branch's first kept call, and a resume_main with none skips both. An empty
  // branch is not free on the device (W2 measured the HC split dropped from its own branch: +50 µs a token).
  void fork() override {
    if (removed_ == 0 || priming_) {
      in_.fork();
      return;
    }
    fork_pending_ = true;
  }
  void resume_main() override {
    if (fork_pending_) {
      fork_pending_ = false;
      return;
    }
    in_.resume_main();
  }
  void join() override {
    fork_pending_ = false;
    in_.join();
  }
  // ForwardingBackend leaves these to Backend's defaults (one compressor call a job, no prefetch), which are not
  // the CUDA backend's launches: pass them on.
  void prefetch(std::span<const backend::Weight> ws) override {
    start_branch();
    in_.prefetch(ws);
  }
  void compressor_many(std::span<const backend::CompressorArgs> jobs) override {
    if (!drop(CritStage::comp)) in_.compressor_many(jobs);
  }
  void compressors_and_qat(std::span<const backend::CompressorArgs> jobs, const backend::IndexerQatArgs& qat) override {
    if (!drop(CritStage::comp)) in_.compressors_and_qat(jobs, qat);
  }

  void matmul(const backend::MatmulArgs& a) override {
    if (!drop(of(a.w.data))) in_.matmul(a);
  }
  void matmul_many(std::span<const backend::MatmulArgs> jobs) override {
    if (!drop(jobs.empty() ? CritStage::other : of(jobs[0].w.data))) in_.matmul_many(jobs);
  }
  void rms_norm(const backend::RmsNormArgs& a) override {
    // The head's first norm is its only unweighted one (flat = RMSNorm(X) over nhc·dim).
    if (!drop(a.w == nullptr ? CritStage::head : of(a.w))) in_.rms_norm(a);
  }
  void norm_rope(const backend::NormRopeArgs& a) override {
    // The query's norm + RoPE is the only unweighted one (per-head RMSNorm without weights).
    if (!drop(a.w == nullptr ? CritStage::q : of(a.w))) in_.norm_rope(a);
  }
  void rope(const backend::RopeArgs& a) override {  // the indexer query's RoPE without QAT numerics
    if (!drop(CritStage::comp)) in_.rope(a);
  }
  void scale(float* y, float s, int64_t count) override {  // the indexer weights' scale without QAT numerics
    if (!drop(CritStage::comp)) in_.scale(y, s, count);
  }
  void indexer_qat(const backend::IndexerQatArgs& a) override {
    if (!drop(CritStage::comp)) in_.indexer_qat(a);
  }
  void compressor(const backend::CompressorArgs& a) override {
    if (!drop(CritStage::comp)) in_.compressor(a);
  }
  void indexer(const backend::IndexerArgs& a) override {
    if (!drop(CritStage::indexer)) in_.indexer(a);
  }
  void hc_split(const backend::HcSplitArgs& a) override {
    if (!drop(CritStage::hcsplit)) in_.hc_split(a);
  }
  void hc_pre(const backend::HcPreArgs& a) override {
    const bool folded = a.prev_post.n > 0;
    if (backend::hc_pre_head_form(a)) {  // the output head's HC, with the last layer's post folded in (decode)
      const bool post_gone = folded && drop(CritStage::hcpost);
      const bool boundary_gone = folded && drop(CritStage::boundary);
      const bool no_post = post_gone || boundary_gone;
      backend::HcPreArgs b = a;  // without the post: x keeps what it held
      if (no_post) b.prev_post.n = 0;
      if (!drop(CritStage::head))
        in_.hc_pre(b);
      else if (folded && !no_post)
        in_.hc_post(a.prev_post);
      return;
    }
    const bool no_post = folded && drop(CritStage::hcpost);
    if (drop(CritStage::boundary)) return;
    if (!no_post) {
      in_.hc_pre(a);
      return;
    }
    backend::HcPreArgs b = a;  // the pre alone: the post's new state is not formed (x keeps what it held)
    b.prev_post.n = 0;
    in_.hc_pre(b);
  }
  void hc_post(const backend::HcPostArgs& a) override {  // the head's flush of the last sublayer's post
    const bool no_post = drop(CritStage::hcpost);
    if (!drop(CritStage::boundary) && !no_post) in_.hc_post(a);
  }
  void hc_head(const backend::HcHeadArgs& a) override {
    if (!drop(CritStage::head)) in_.hc_head(a);
  }
  void hc_collapse(const backend::HcCollapseArgs& a) override {
    if (!drop(CritStage::head)) in_.hc_collapse(a);
  }
  void argmax(const backend::ArgmaxArgs& a) override {
    if (!drop(CritStage::head)) in_.argmax(a);
  }
  void attention(const backend::AttentionArgs& a) override {
    if (!drop(CritStage::attn)) in_.attention(a);
  }
  void router(const backend::RouterArgs& a) override {
    if (!drop(CritStage::router)) in_.router(a);
  }
  void moe(const backend::MoeArgs& a) override {
    if (!drop(CritStage::experts)) in_.moe(a);
  }
  void swiglu(const backend::SwigluArgs& a) override {
    if (!drop(CritStage::shared)) in_.swiglu(a);
  }
  void embed(const backend::EmbedArgs& a) override {
    tally(CritStage::other);
    start_branch();
    in_.embed(a);
  }

 private:
  CritStage of(const void* p) const {
    const auto it = stage_of_.find(p);
    return it == stage_of_.end() ? CritStage::other : it->second;
  }
  void tally(CritStage s) {
    if (counting_) ++counts_[static_cast<size_t>(s)];
  }
  // The fork a kept call on a branch needs (fork()).
  void start_branch() {
    if (!fork_pending_) return;
    fork_pending_ = false;
    in_.fork();
  }
  // Counts the call; true when its stage is removed (never while priming; "other" is never removed). A kept call
  // first makes its branch's pending fork.
  bool drop(CritStage s) {
    tally(s);
    const bool dropped = !priming_ && s != CritStage::other && (removed_ & crit_bit(s)) != 0;
    if (!dropped) start_branch();
    return dropped;
  }

  std::unordered_map<const void*, CritStage> stage_of_;  // weight / norm-vector address → stage
  uint32_t removed_ = 0;
  bool priming_ = false;
  bool fork_pending_ = false;  // a fork not yet passed on (its branch has had no kept call so far)
  bool counting_ = false;
  std::array<int64_t, kCritStages> counts_{};
};

}  // namespace ds4::test
