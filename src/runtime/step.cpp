// step.cpp — Engine::step: several sessions advanced in one call (the batching entry point).
//
// Validates the whole batch first, so a bad item changes nothing. This version advances the
// sessions one after another through Session::eval; the batched forward pass (one pass over all
// items' tokens) replaces the loop without changing the contract.
#include <string>
#include <unordered_set>

#include "runtime/engine_impl.h"

namespace ds4::runtime {

Status EngineImpl::step(std::span<const StepItem> items, const EvalOptions& opts) {
  int64_t total = 0;
  std::unordered_set<const Session*> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    const std::string where = "step: item " + std::to_string(i) + ": ";
    if (it.session == nullptr) return invalid_argument(where + "no session");
    if (!sessions_.count(static_cast<SessionImpl*>(it.session)))
      return invalid_argument(where + "session does not belong to this engine");
    if (!seen.insert(it.session).second) return invalid_argument(where + "session appears twice in one step");
    if (it.tokens.empty()) return invalid_argument(where + "no tokens");
    if (it.session->position() + static_cast<int64_t>(it.tokens.size()) > it.session->max_context())
      return invalid_argument(where + std::to_string(it.tokens.size()) + " more tokens at position " +
                              std::to_string(it.session->position()) + " exceed the context limit of " +
                              std::to_string(it.session->max_context()));
    total += static_cast<int64_t>(it.tokens.size());
  }
  if (total > max_step_tokens())
    return invalid_argument("step: " + std::to_string(total) + " tokens exceed the step limit of " +
                            std::to_string(max_step_tokens()));
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t before = items[i].session->position();
    Status st = items[i].session->eval(items[i].tokens, opts);
    if (st.ok()) continue;
    // Undo the sessions already advanced so the batch fails as a whole.
    for (size_t j = 0; j < i; ++j)
      (void)items[j].session->rewind(items[j].session->position() - static_cast<int64_t>(items[j].tokens.size()));
    if (items[i].session->position() != before) (void)items[i].session->rewind(before);
    return st.with_context("step: item " + std::to_string(i));
  }
  return Status::Ok();
}

}  // namespace ds4::runtime
