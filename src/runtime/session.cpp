// session.cpp — one inference timeline: eval in chunks, rewind by replay (memory: memory_report.cpp).
#include <algorithm>
#include <string>

#include "modelspec/memory_plan.h"
#include "runtime/engine_impl.h"

namespace ds4::runtime {

SessionImpl::SessionImpl(EngineImpl& engine, model::KvState kv, int64_t max_context)
    : engine_(engine), kv_(std::move(kv)), max_context_(max_context), id_(engine.next_session_id()) {
  engine_.attach(this);
}

SessionImpl::~SessionImpl() { engine_.detach(this); }

Status SessionImpl::run(std::span<const TokenId> tokens, const EvalOptions& opts, std::vector<float>* all,
                        TokenId* next, TokenId exclude) {
  model::Forward& fw = engine_.forward();
  const int64_t V = engine_.config().n_vocab;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t chunk = opts.chunk > 0 ? std::min<int64_t>(opts.chunk, fw.max_chunk()) : fw.max_chunk();
  if (all) all->assign(static_cast<size_t>(n * V), 0.0f);
  logits_.resize(static_cast<size_t>(V));
  for (int64_t done = 0; done < n;) {
    if (opts.should_cancel && opts.should_cancel(opts.cancel_user))
      return cancelled("session: evaluation cancelled after " + std::to_string(done) + " of " + std::to_string(n) +
                       " tokens");
    const int64_t m = std::min(chunk, n - done);
    const auto part = tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(m));
    const int64_t pos0 = static_cast<int64_t>(tokens_.size());
    // A greedy chunk hands back its last token's argmax only; earlier chunks' results are overwritten.
    model::Segment seg{&kv_, part, pos0, nullptr, all != nullptr, next, exclude};
    if (all) seg.logits_out = all->data() + done * V;
    else if (!next) seg.logits_out = logits_.data();
    Status st = fw.eval_batch(std::span<const model::Segment>(&seg, 1));
    logits_deferred_ = false;
    if (next) defer_logits(0);  // logits_ stale (or partly written) until ensure_logits()
    if (!st.ok()) {
      // The chunk may have left partial rows behind: rebuild the state of the tokens kept so far.
      Status rs = replay(pos0);
      return rs.ok() ? st : st.with_context("session state rebuilt after failure: " + rs.to_string());
    }
    // Token ids grow in fixed steps (memory_plan's kTokenIdBlock), so the planner can count them exactly.
    if (tokens_.size() + part.size() > tokens_.capacity())
      tokens_.reserve(static_cast<size_t>(modelspec::round_up(tokens_.size() + part.size(), modelspec::kTokenIdBlock)));
    tokens_.insert(tokens_.end(), part.begin(), part.end());
    if (all) std::copy(all->begin() + (done + m - 1) * V, all->begin() + (done + m) * V, logits_.begin());
    done += m;
  }
  return Status::Ok();
}

static Status check_room(int64_t pos, size_t n, int64_t limit) {
  if (pos + static_cast<int64_t>(n) > limit)
    return invalid_argument("session: " + std::to_string(n) + " more tokens at position " + std::to_string(pos) +
                            " exceed the context limit of " + std::to_string(limit));
  return Status::Ok();
}

Status SessionImpl::eval(std::span<const TokenId> tokens, const EvalOptions& opts) {
  DS4_RETURN_IF_ERROR(check_room(position(), tokens.size(), max_context_));
  if (tokens.empty()) return Status::Ok();
  return run(tokens, opts, nullptr);
}

Status SessionImpl::eval_all(std::span<const TokenId> tokens, std::vector<float>& all_logits,
                             const EvalOptions& opts) {
  DS4_RETURN_IF_ERROR(check_room(position(), tokens.size(), max_context_));
  if (tokens.empty()) {
    all_logits.clear();
    return Status::Ok();
  }
  return run(tokens, opts, &all_logits);
}

void SessionImpl::append_token(TokenId t) {
  if (tokens_.size() + 1 > tokens_.capacity())
    tokens_.reserve(static_cast<size_t>(modelspec::round_up(tokens_.size() + 1, modelspec::kTokenIdBlock)));
  tokens_.push_back(t);
}

Status SessionImpl::eval_greedy(std::span<const TokenId> tokens, TokenId* next, TokenId exclude,
                                const EvalOptions& opts) {
  DS4_RETURN_IF_ERROR(check_room(position(), tokens.size(), max_context_));
  if (next == nullptr) return invalid_argument("session: eval_greedy needs a destination for the token");
  if (tokens.empty()) return invalid_argument("session: eval_greedy needs at least one token");
  return run(tokens, opts, nullptr, next, exclude);
}

std::span<const float> SessionImpl::logits() const {
  // Logically const: the logits after the current tokens exist, they are only computed late. The object
  // is never const itself (sessions are made by Engine::new_session), so the cast is defined.
  if (logits_deferred_ && !const_cast<SessionImpl*>(this)->ensure_logits().ok()) return {};
  return logits_;
}

Status SessionImpl::ensure_logits() {
  if (!logits_deferred_) return Status::Ok();
  DS4_ASSIGN_OR_RETURN(const bool fetched,
                       engine_.forward().fetch_logits(logits_serial_, logits_row_, logits_.data()));
  if (fetched) {
    logits_deferred_ = false;
    return Status::Ok();
  }
  Status st;
  if (!rewind_cheap(position(), st)) st = replay(position());
  return st;
}

Status SessionImpl::replay(int64_t n) {
  // Compressor frontiers and the raw ring cannot be un-written, so the state after n tokens is
  // rebuilt by evaluating them again from an empty timeline (same logits by construction).
  std::vector<TokenId> keep(tokens_.begin(), tokens_.begin() + n);
  tokens_.clear();
  logits_.clear();
  logits_deferred_ = false;
  kv_.reset();
  ring_floor_ = 0;
  if (!keep.empty()) DS4_RETURN_IF_ERROR(run(keep, EvalOptions{}, nullptr));
  return kv_.trim();  // blocks of rows the rebuilt timeline no longer holds go back
}

Status SessionImpl::rewind(int64_t n_tokens) {
  if (n_tokens < 0 || n_tokens > position())
    return invalid_argument("session: cannot rewind to " + std::to_string(n_tokens) + " tokens (position " +
                            std::to_string(position()) + ")");
  if (n_tokens == position()) return Status::Ok();
  Status st;
  if (n_tokens > 0 && rewind_cheap(n_tokens, st)) return st;
  DS4_RETURN_IF_ERROR(replay(n_tokens));
  return kv_.trim();
}

bool SessionImpl::rewind_cheap(int64_t n_tokens, Status& st) {
  // The raw ring and the compressor frontier rings still hold the inputs of the last max_chunk − 1
  // tokens, so the state after m = n − 1 tokens is the current one with the compressed row counts cut
  // back; evaluating token n − 1 again then gives the state and logits after n.
  const int64_t m = n_tokens - 1;
  if (m < ring_floor_ || position() - m > engine_.forward().max_chunk() - 1) return false;
  const TokenId last = tokens_[static_cast<size_t>(m)];
  tokens_.resize(static_cast<size_t>(m));
  for (auto& k : kv_.layers())
    if (k.ratio) k.n_comp = m / k.ratio;
  st = run(std::span<const TokenId>(&last, 1), EvalOptions{}, nullptr);
  if (st.ok()) {
    st = kv_.trim();  // give back the blocks of the dropped rows
    return true;
  }
  tokens_.push_back(last);  // run() kept the first m tokens; the caller rebuilds all n from scratch
  return false;
}

}  // namespace ds4::runtime
