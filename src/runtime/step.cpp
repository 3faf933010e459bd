// step.cpp — Engine::step: several sessions advanced by ONE forward pass (Forward::eval_batch).
//
// Each item becomes a segment (its session's KvState, tokens, position); every weight is read once for
// all the step's tokens. The whole batch is validated and the compressed rows it emits are reserved
// before any state is written, so a bad item (or a failed allocation) changes no session; a failure
// during the pass itself (a backend error) rebuilds the participating sessions to where they were.
// Deliberately not here: choosing which sessions advance or by how many tokens (the scheduler).
#include <string>

#include "runtime/engine_impl.h"

namespace ds4::runtime {

Status EngineImpl::step(std::span<const StepItem> items, const EvalOptions& opts) {
  int64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    // Messages are built only on failure: a valid decode step allocates nothing here.
    auto bad = [i](const std::string& what) { return invalid_argument("step: item " + std::to_string(i) + ": " + what); };
    if (it.session == nullptr) return bad("no session");
    if (!sessions_.count(static_cast<SessionImpl*>(it.session))) return bad("session does not belong to this engine");
    for (size_t j = 0; j < i; ++j)
      if (items[j].session == it.session) return bad("session appears twice in one step");
    if (it.tokens.empty()) return bad("no tokens");
    if (it.exclude < -1 || it.exclude >= static_cast<TokenId>(cfg_.n_vocab))
      return bad("excluded token id " + std::to_string(it.exclude) + " is outside the vocabulary");
    if (it.session->position() + static_cast<int64_t>(it.tokens.size()) > it.session->max_context())
      return bad(std::to_string(it.tokens.size()) + " more tokens at position " +
                 std::to_string(it.session->position()) + " exceed the context limit of " +
                 std::to_string(it.session->max_context()));
    total += static_cast<int64_t>(it.tokens.size());
  }
  if (items.empty()) return Status::Ok();
  if (total > max_step_tokens())
    return invalid_argument("step: " + std::to_string(total) + " tokens exceed the step limit of " +
                            std::to_string(max_step_tokens()));
  if (opts.should_cancel && opts.should_cancel(opts.cancel_user))
    return cancelled("step: cancelled before evaluation");

  // Logits go straight into each session's buffer: the head writes them only after every layer ran,
  // and a failed pass rebuilds the sessions (logits included) anyway.
  step_segments_.clear();
  for (const StepItem& it : items) {
    auto* s = static_cast<SessionImpl*>(it.session);
    step_segments_.push_back({&s->kv_, it.tokens, s->position(), nullptr, false, it.next, it.exclude});
  }
  Status st = forward_->prepare(step_segments_);
  if (!st.ok()) return st.with_context("step");
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  for (size_t i = 0; i < items.size(); ++i) {
    auto* s = static_cast<SessionImpl*>(items[i].session);
    s->logits_.resize(V);
    if (!items[i].next) step_segments_[i].logits_out = s->logits_.data();  // greedy: the token only
  }
  st = forward_->eval_batch(step_segments_);
  if (!st.ok()) {
    // Any participant may hold partial rows of this step: rebuild each from its own tokens.
    for (const StepItem& it : items) {
      auto* s = static_cast<SessionImpl*>(it.session);
      Status rs = s->replay(s->position());
      if (!rs.ok()) st = st.with_context("session state rebuilt after failure: " + rs.to_string());
    }
    return st.with_context("step");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    auto* s = static_cast<SessionImpl*>(items[i].session);
    s->tokens_.insert(s->tokens_.end(), items[i].tokens.begin(), items[i].tokens.end());
    s->logits_deferred_ = false;
    if (items[i].next) s->defer_logits(static_cast<int64_t>(i));  // one head row per item, in item order
  }
  return Status::Ok();
}

StepTimes EngineImpl::step_times() const {
  const model::StepTimes& f = forward_->times();
  return {f.steps, f.prepare, f.launch, f.wait, f.device, f.device_steps};
}

}  // namespace ds4::runtime
