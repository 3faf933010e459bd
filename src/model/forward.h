// forward.h — the DeepSeek V4 forward pass, written once against backend::Backend (MODEL.md §6-9).
//
// Forward::eval_batch runs one step over several sessions: each Segment is a run of consecutive tokens
// of one session (a prefill chunk or a decode token). The n columns of all segments are processed
// layer-major together: every per-token op (embedding, HC, norms, each projection matmul, router, MoE,
// shared expert, output head) runs once over all n columns, so a weight is read once per step and a
// routed expert once for all columns routed to it; only the ops that read or append per-session state
// (raw ring, compressors, indexer, attention) run once per segment on that segment's columns.
// Forward::eval is the one-segment case. A chunk gives the same logits as feeding its tokens one at a
// time (§9.2), and a segment gives the same logits whatever else shares its step (the CPU ops compute
// columns independently, so bit-identical there). Scratch is allocated once for `max_chunk` columns.
// Numerics selects between ds4/official simulations and the HF-compatible float32 reference.
// Deliberately not here: tokens/logits bookkeeping, snapshots (runtime), MTP drafting.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "ds4/status.h"
#include "model/kv_state.h"
#include "model/weights.h"
#include "modelspec/config.h"
#include "modelspec/layer_plan.h"

namespace ds4::model {

// What the forward pass simulates and how it rounds (MODEL.md §12 "Recommended engine switches").
struct ForwardNumerics {
  bool fp8_kv = true;              // §5.4 FP8 round trip of KV / compressed rows (nope dims)
  bool indexer_qat = true;         // §5.5 Hadamard + FP4 of indexer queries and rows
  bool f16_cache = true;           // §5.6 cached rows rounded through f16 (ds4 CPU)
  bool shared_expert_clamp = true; // §8 step 6 (current official, ds4; HF rev. B does not clamp)
  backend::MatmulNumerics matmul = backend::MatmulNumerics::ds4;
  float router_denom_guard = 6.103515625e-5f;  // ds4 2^-14; HF adds 1e-20

  static ForwardNumerics official() { return {}; }
  static ForwardNumerics reference() {
    return {false, false, false, true, backend::MatmulNumerics::exact, 1e-20f};
  }
};

// ForwardOptions::branches: which independent parts of a layer the forward pass runs as concurrent
// branches (Backend::fork / resume_main / join): the shared expert beside the router and routed experts;
// the attention sublayer's KV path and compressors + indexer beside its query path.
// kBranchHcSplit: each HC pre's Sinkhorn split (post, comb: read only by the sublayer's HC post) on the
// side lane beside the sublayer, so the HC pre that the sublayer waits for ends after its collapse and norm.
// Not in the default: on the H200 the HC pre without its split took 7.67 against 7.77 µs (graph, n = 1) —
// the collapse + norm block, not Sinkhorn, is the finish kernel's longer path — for one more launch per
// sublayer (docs/PERF.md, session 7 small).
inline constexpr uint32_t kBranchSharedExpert = 1, kBranchAttention = 2, kBranchHcSplit = 4;

// ForwardOptions::l2_prefetch: which weights the forward pass asks the backend to pull into its cache
// (Backend::prefetch, on the side lane) ahead of the latency-bound ops before their matmuls: q_a, kv and
// q_b beside the attention sublayer's HC pre; out_a (and/or out_b) beside attention; the shared expert
// beside the FFN sublayer's HC pre. A hint: the same bits whichever are on.
inline constexpr uint32_t kPrefetchQuery = 1, kPrefetchOutA = 2, kPrefetchOutB = 4, kPrefetchShared = 8;

struct ForwardOptions {
  int64_t max_chunk = 64;  // tokens per eval call; scratch and the raw ring are sized for it
  ForwardNumerics numerics;
  // Decode steps (one token per session, or any step of several sessions) run as recorded backend
  // graphs (Backend::graph_begin; CUDA graphs), keyed by forward_graph.cpp's step key, emitting steps
  // included. Such a step reads its session state, and the rows it emits, through the per-column device
  // tables (as several sessions do), and every step rounds the attention / indexer host bounds up to a
  // bucket (Forward::row_bound). Same bits as off. Needs max_chunk > 1 (the tables' room).
  bool graphs = false;
  // Parts run as concurrent branches (kBranch* bits). A backend without a second lane (the CPU, CUDA with
  // CudaBackendOptions::branches off) runs them in order; the same bits whichever are on (for measurements).
  uint32_t branches = kBranchSharedExpert | kBranchAttention;
  // Weights prefetched ahead of their matmuls (kPrefetch* bits; 0: none).
  uint32_t l2_prefetch = 0;
  // Host clocks around each piece of eval_batch and device timestamps around its ops (Forward::times;
  // ds4-bench --profile-host). Off: no clock is read.
  bool profile = false;
};

// Where eval_batch's time went (ForwardOptions::profile), summed over steps. Host seconds per piece; device
// seconds from the step's first op to its last (Backend::time_mark; 0 when the backend has no timestamps).
struct StepTimes {
  int64_t steps = 0;
  double prepare = 0;  // checks, KV room, the step input tables and their upload
  double launch = 0;   // graph lookup and launch, or the eager launches
  double wait = 0;     // until the results (logits or token ids) are on the host: mostly the device running
  double device = 0;
  int64_t device_steps = 0;  // steps with a device figure
};

// With ForwardOptions::graphs, host bounds of compressed rows (AttentionArgs::max_comp,
// IndexerArgs::max_rows) are rounded up to the smallest of these: a multiple of this up to 1,024 rows,
// then quarter steps of the power of two below (≤ 4 buckets per doubling, ≤ 25 % over), so one
// recorded step serves a growing context for many steps and a 32K context needs a few dozen buckets.
inline constexpr int64_t kGraphRowBucket = 128;

// One session's share of a step: tokens at positions pos0 … pos0+n−1 appended to *kv.
struct Segment {
  KvState* kv = nullptr;
  std::span<const int32_t> tokens;  // n ≥ 1
  int64_t pos0 = 0;                 // tokens already in kv
  float* logits_out = nullptr;      // host: [n][V] when all_logits, else [V] for the last token
  bool all_logits = false;
  // Greedy decoding: host destination of the last token's next token id (the argmax of its logits, lowest
  // id on ties, never `exclude`), picked on the device (Backend::argmax, inside the step graph) so only 4
  // bytes come back. With token_out, logits_out may be null: the logits are then not downloaded at all.
  int32_t* token_out = nullptr;
  int32_t exclude = -1;             // −1: none
};

class Forward {
 public:
  static Result<std::unique_ptr<Forward>> create(backend::Backend& be, const modelspec::ModelConfig& cfg,
                                                 const ModelWeights& weights, const ForwardOptions& opts);
  ~Forward();  // drops this Forward's step graphs from the backend (forward_graph.cpp)

  // Runs tokens[0..n) at positions pos0 … pos0+n−1 (n ≤ max_chunk, pos0 = tokens already in `kv`).
  // logits_out (host) receives [n][V] when all_logits, else [V] for the last token.
  Status eval(KvState& kv, std::span<const int32_t> tokens, int64_t pos0, float* logits_out, bool all_logits);

  // Checks a step (segments non-empty, distinct states, Σn ≤ max_chunk, token ids, positions) and makes
  // room for the compressed rows it will emit. Writes no session state, so an error here leaves every
  // KvState as it was (reserved capacity may have grown).
  Status prepare(std::span<const Segment> segs);
  // Every segment needs logits_out. prepare(), then one forward pass over all segments. An error from prepare() changes no state; a
  // later (backend) error may leave partial rows in any segment's KvState: the caller rebuilds them.
  Status eval_batch(std::span<const Segment> segs);

  // Pipelined greedy decoding of one session (Session::generate_greedy). launch_greedy enqueues the decode
  // step of `token` at pos0 — or, with from_device, of the greedy token of the step launched just before,
  // copied on the device into this step's inputs (no host round trip) — and queues the read-back of its own
  // greedy token (never `exclude`) into Backend read-back slot `slot`; finish_greedy(slot) waits for that
  // token alone, so the next step can be launched first and the device never waits for the host. At most
  // Backend::kReadBackSlots steps in flight. The same step (graph) as eval_batch's greedy decode, so the
  // same bits. Errors as eval_batch: a launch error changes no state; later ones may leave partial rows.
  Status launch_greedy(KvState& kv, int64_t pos0, int32_t token, bool from_device, int32_t exclude, int slot);
  Status finish_greedy(int slot, int32_t* token);

  // Each step (eval_batch, launch_greedy) gets a serial number; its logits rows stay in device scratch
  // until the next step. fetch_logits copies row `row` ([V] floats) of step `serial`'s logits to dst
  // while that step is still the last one (a greedy session's deferred logits, no recompute); false when
  // a later step overwrote them.
  uint64_t step_serial() const { return serial_; }
  Result<bool> fetch_logits(uint64_t serial, int64_t row, float* dst);

  // An empty session state whose compressed rows may grow to max_context tokens (memory is committed
  // as they arrive; see kv_state.h).
  Result<KvState> new_state(int64_t max_context) const;
  int64_t max_chunk() const { return opts_.max_chunk; }
  int64_t raw_cap() const;
  const modelspec::ModelConfig& config() const { return cfg_; }
  const std::vector<modelspec::LayerPlan>& plan() const { return plan_; }
  const ForwardOptions& options() const { return opts_; }
  uint64_t scratch_bytes() const;
  const StepTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }
  // What alloc_scratch() allocates for this config and max_chunk, computed without allocating (the memory
  // planner's figure): modelspec::forward_activation_bytes plus the step-input tables. Keep in step with
  // alloc_scratch; tests/memory checks it against a live engine's count.
  static uint64_t planned_scratch_bytes(const modelspec::ModelConfig& cfg, int64_t max_chunk);

 private:
  Forward(backend::Backend& be, const modelspec::ModelConfig& cfg, const ModelWeights& w, const ForwardOptions& o);
  Status alloc_scratch();
  uint64_t step_input_bytes(int64_t n, int64_t segments) const;
  void upload_step_inputs(std::span<const Segment> segs, int64_t n);
  void hc_pre(const Weight& fn, const float* scale, const float* base, const float* norm_w, int64_t n,
              bool split = true);
  // What hc_pre(…, split = false) left to the caller: post and comb from mix_, on the current lane.
  void hc_split(const float* scale, const float* base, int64_t n);
  void hc_post_swap(int64_t n, const float* f_add = nullptr);
  void flush_post();  // the deferred HC post (pending_post_) as its own op, before anything else reads x_
  Status attention_layer(size_t l, std::span<const Segment> segs, int64_t n);
  // With qat (the indexer query's RoPE + QAT, independent of the compressors): issued in the same backend call.
  Status compress(size_t l, std::span<const Segment> segs, int64_t n, const backend::IndexerQatArgs* qat);
  Status compressor_args(size_t l, std::span<const Segment> segs, bool indexer, backend::CompressorArgs& a,
                         int64_t* emitted_one);
  Status compressed_rows(size_t l, std::span<const Segment> segs, int64_t n, bool indexer, int64_t emitted_one);
  void compressor_proj(size_t l, int64_t n, bool select);
  Status compressors_and_indexer(size_t l, std::span<const Segment> segs, int64_t n, bool select, int64_t comp_bound);
  float* comp_in(const backend::Buffer& b, bool indexer) const;
  void ffn_layer(size_t l, int64_t n);
  void head(const float* X, int64_t count);
  void logits_head(std::span<const Segment> segs);
  void pick_tokens(std::span<const Segment> segs);      // greedy segments' argmax (device), after the head
  void logits_download(std::span<const Segment> segs);  // logits and greedy token ids to the host
  Status run_step(std::span<const Segment> segs, int64_t n);            // embed, layers, head (no transfers)
  bool graph_recordable(std::span<const Segment> segs) const;          // forward_graph.cpp
  void graph_step_key(std::span<const Segment> segs, int64_t n);        // forward_graph.cpp
  Status run_step_graphed(std::span<const Segment> segs, int64_t n);    // forward_graph.cpp
  void replayed_host_state(std::span<const Segment> segs);               // forward_graph.cpp
  int64_t row_bound(int64_t rows) const;                                // forward_graph.cpp
  void mm(const Weight& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n);
  // With `part` in ForwardOptions::l2_prefetch: Backend::prefetch(ws) on the side lane (the main lane goes on).
  void prefetch(uint32_t part, std::initializer_list<Weight> ws);

  backend::Backend& be_;
  modelspec::ModelConfig cfg_;
  std::vector<modelspec::LayerPlan> plan_;
  const ModelWeights& w_;
  ForwardOptions opts_;
  std::vector<double> freq_main_, freq_comp_;  // RoPE ω tables: ratio-0 layers, compressed layers

  // Scratch, all sized for max_chunk tokens (C). Shapes per buffer:
  backend::Buffer x_, x2_;        // [C][NHC][E] HC state (ping-pong)
  // The last sublayer's HC post (x2_ → x_ after the swap), not yet issued: the next hc_pre takes it as
  // HcPreArgs::prev_post (a backend may fold it in), the head's flush_post otherwise. n = 0: none. Set by
  // hc_post_swap, cleared by its consumer and at the start of every step.
  backend::HcPostArgs pending_post_;
  backend::Buffer flat_;          // [C][NHC·E] RMSNorm(flat(X))
  backend::Buffer mix_;           // [C][M] HC controls
  backend::Buffer pre_, post_;    // [C][NHC]
  backend::Buffer comb_;          // [C][NHC][NHC]
  backend::Buffer y_, xn_;        // [C][E] collapse and its normed copy (sublayer input)
  backend::Buffer qa_;            // [C][Q] q latent
  backend::Buffer q_;             // [C][H][D] queries, then attention output
  backend::Buffer kv_;            // [C][D]
  backend::Buffer ckv_, cgate_;   // [C][2·D] attention compressor, then [C][2·ID] indexer compressor projections
  backend::Buffer cpos_;          // [2][C] i32 positions of emitted rows (attention compressor, indexer)
  backend::Buffer iq_;            // [C][IH][ID] indexer queries
  backend::Buffer iw_;            // [C][IH] indexer head weights
  backend::Buffer idx_;           // [C][TK] i32 selected compressed rows
  backend::Buffer icount_;        // [C] i32
  backend::Buffer attn_;          // [C][H][D] attention output
  backend::Buffer low_;           // [C][G·Ro]
  backend::Buffer f_;             // [C][E] sublayer output
  backend::Buffer rlogit_;        // [C][NE] router logits
  backend::Buffer rids_;          // [C][K] i32
  backend::Buffer rw_;            // [C][K]
  backend::Buffer sg_, su_;       // [C][F] shared expert
  backend::Buffer sout_;          // [C][E]
  backend::Buffer hw_;            // [C][NHC] head weights
  backend::Buffer logits_;        // [C][V]
  // Step inputs, written on the host and uploaded once per step (so the layers themselves need no
  // host→device transfer; a CUDA graph can then cover them). For a step of n columns, packed:
  //   tok [n] i32 | pos [n] i32 | ccount [NR][n] i32 (rows visible per column, one row per distinct
  //   compression ratio) | epos [NR][n] i32 | ecount [NR] i32 (rows emitted) | pad to 8 | (tables
  //   steps only) tables [L][3][n] of raw ring / compressed rows / indexer rows base pointers, the
  //   per-query session state of attention/indexer, then erows [L][2][n] (emitted rows' addresses),
  //   then [L][2][S] compressor segments (each session's frontier and output rows, both compressors).
  backend::Buffer in_;
  std::vector<uint8_t> host_in_;
  std::vector<int64_t> ratios_;     // distinct compression ratios (NR)
  std::vector<int> ratio_slot_;     // [L] index into ratios_, −1 without compressor
  const int32_t* tok_ = nullptr;    // views into in_ for the current step
  const int32_t* pos_ = nullptr;
  const int32_t* ccount_ = nullptr; // [NR][n]
  const float* const* tables_ = nullptr;  // [L][3][n] or null (one session)
  // Rows emitted this step, for the ops that finish them (tables steps only; upload_step_inputs): per
  // ratio the count and each row's RoPE position (its block's first token), per layer and compressor
  // (attention, indexer) each row's address; entries in segment order, at most n per ratio.
  const int32_t* ecount_ = nullptr;       // [NR]
  const int32_t* epos_ = nullptr;         // [NR][n]
  float* const* erows_ = nullptr;         // [L][2][n] or null
  std::vector<int64_t> emit_bound_;       // [NR] host: 0 when no row of that ratio is emitted, else n
  const backend::CompressorSegment* comp_seg_ = nullptr;  // [L][2][S] or null (one session)
  std::vector<int64_t> off_;      // [segments] first column of each segment (capacity C: no allocation)
  std::vector<int64_t> graph_key_;  // the step's graph key (forward_graph.cpp; capacity kept across steps)
  int64_t graph_owner_ = 0;         // Backend::graph_owner id heading every key (0: graphs off)
  StepTimes times_;                 // ForwardOptions::profile
  std::vector<int32_t> host_ids_;   // [C] greedy ids downloaded in one copy (capacity C: no allocation)
  int32_t pipe_token_[backend::Backend::kReadBackSlots] = {};  // launch_greedy's step tokens (Segment views)
  int32_t pipe_unused_ = 0;
  uint64_t serial_ = 0;             // steps enqueued so far (step_serial)         // launch_greedy's Segment::token_out (the read-back delivers the token)
  bool tables_step_ = false;        // this step passes session state through the device tables (several
                                    // sessions, or a recordable step with graphs); else one session by value
};

}  // namespace ds4::model
