// engine_impl.h — the concrete Engine and Session behind include/ds4/engine.h (runtime-internal).
//
// EngineImpl owns, in destruction order: the live-session registry, the forward pass (scratch), the
// bound weights, the backend (threads, buffers), the tokenizer and the mapped GGUF. Sessions hold a
// reference to their engine, which must outlive them. One thread owns an engine and its sessions.
// Deliberately not here: deciding which sessions advance each step (the server's scheduler does that).
#pragma once

#include <chrono>
#include <memory>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "ds4/engine.h"
#include "gguf/gguf.h"
#include "model/forward.h"
#include "model/kv_state.h"
#include "model/weights.h"
#include "modelspec/config.h"

namespace ds4::runtime {

class SessionImpl;

class EngineImpl final : public Engine {
 public:
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& opts);
  ~EngineImpl() override;

  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  Result<std::unique_ptr<Session>> new_session(const SessionOptions& opts) override;
  MemoryReport memory_report() const override;
  Status step(std::span<const StepItem> items, const EvalOptions& opts) override;
  int64_t max_step_tokens() const override { return forward_->max_chunk(); }
  StepTimes step_times() const override;  // step.cpp
  void reset_step_times() override { forward_->reset_times(); }

  model::Forward& forward() { return *forward_; }
  backend::Backend* forward_backend() const { return backend_.get(); }
  const modelspec::ModelConfig& config() const { return cfg_; }
  void attach(SessionImpl* s) { sessions_.insert(s); }
  void detach(SessionImpl* s) { sessions_.erase(s); }
  uint64_t next_session_id() { return ++session_ids_; }

 private:
  EngineImpl() = default;

  EngineOptions opts_;
  ModelInfo info_;
  modelspec::ModelConfig cfg_;
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<backend::Backend> backend_;
  model::ModelWeights weights_;
  std::unique_ptr<model::Forward> forward_;
  std::set<SessionImpl*> sessions_;
  uint64_t session_ids_ = 0;
  std::vector<model::Segment> step_segments_;  // step()'s segments, reused (capacity grows once)
  // memory_report's mincore of a large weight mapping costs ~10 ms per 10 GB: reused for 2 s.
  mutable uint64_t resident_cache_ = 0;
  mutable std::chrono::steady_clock::time_point resident_at_{};
};

class SessionImpl final : public Session {
 public:
  SessionImpl(EngineImpl& engine, model::KvState kv, int64_t max_context);
  ~SessionImpl() override;

  Status eval(std::span<const TokenId> tokens, const EvalOptions& opts) override;
  Status eval_all(std::span<const TokenId> tokens, std::vector<float>& all_logits, const EvalOptions& opts) override;
  Status eval_greedy(std::span<const TokenId> tokens, TokenId* next, TokenId exclude,
                     const EvalOptions& opts) override;
  Status generate_greedy(TokenId first, int64_t n, TokenId exclude, const std::function<bool(TokenId)>& on_token,
                         const EvalOptions& opts) override;  // generate.cpp
  std::span<const float> logits() const override;  // recomputes deferred logits (ensure_logits)
  std::span<const TokenId> tokens() const override { return tokens_; }
  int64_t max_context() const override { return max_context_; }
  Status rewind(int64_t n_tokens) override;
  Result<SessionSnapshot> snapshot(SnapshotFormat format = SnapshotFormat::f32) const override;
  Status restore(const SessionSnapshot& snap) override;
  SessionMemory memory() const override;

 private:
  // Runs tokens through the model chunk by chunk; all_logits (optional) receives [n][V]. With `next`,
  // the chunks end in the greedy token (Segment::token_out) and the logits are left deferred.
  Status run(std::span<const TokenId> tokens, const EvalOptions& opts, std::vector<float>* all_logits,
             TokenId* next = nullptr, TokenId exclude = -1);
  // After a greedy step the logits were never copied to the host (logits_deferred_): copy them from the
  // device while no later step overwrote them, else evaluate the last token again (the cheap rewind path,
  // else a replay).
  Status ensure_logits();
  void defer_logits(int64_t row) {  // the step just run (its row `row`) holds this session's logits
    logits_deferred_ = true;
    logits_serial_ = engine_.forward().step_serial();
    logits_row_ = row;
  }
  // rewind()'s cheap path to n_tokens (> 0): re-evaluates token n−1 on the state after n−1 tokens, when
  // the rings still hold what that needs. False (nothing changed) when they do not.
  bool rewind_cheap(int64_t n_tokens, Status& st);
  // Appends one evaluated token id (capacity in kTokenIdBlock steps, as the planner counts).
  void append_token(TokenId t);
  // Rebuilds the state of the first n tokens of tokens_ from an empty timeline.
  Status replay(int64_t n);

  friend class EngineImpl;  // step() runs the forward pass over several sessions' state at once
  EngineImpl& engine_;
  model::KvState kv_;
  int64_t max_context_ = 0;
  uint64_t id_ = 0;
  std::vector<TokenId> tokens_;
  std::vector<float> logits_;  // [V] after the last token; empty at position 0
  bool logits_deferred_ = false;  // logits_ is stale: the last step was greedy (StepItem::next)
  // Where the deferred logits are while no later step ran (Forward::fetch_logits): step serial and row.
  uint64_t logits_serial_ = 0;
  int64_t logits_row_ = 0;
  // Earliest position the cheap rewind may return to: the rings hold valid rows only for what was
  // evaluated in this session since position ring_floor_ (a restore() loads just the rows its
  // snapshot needs, so rewinding below the restored position must replay).
  int64_t ring_floor_ = 0;
};

}  // namespace ds4::runtime
