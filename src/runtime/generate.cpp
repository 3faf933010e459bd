// generate.cpp — Session::generate_greedy: greedy decoding of one session with the device one step ahead
// of the host (Forward::launch_greedy / finish_greedy). Step k+1 is launched, its token copied on the
// device from step k's argmax, before step k's token is read back (4 bytes, read-back slot k mod 2), so
// the device runs step after step while the host takes each token (tokens_, the caller's callback). A stop
// (callback false, cancellation) after step k's token leaves step k+1 run ahead: it is rolled back with the
// cheap rewind (exact). Deliberately not here: several sessions (Engine::step), sampling with temperature
// (it needs the logits of each step before the next can start).
#include <string>

#include "runtime/engine_impl.h"

namespace ds4::runtime {

Status SessionImpl::generate_greedy(TokenId first, int64_t n, TokenId exclude,
                                    const std::function<bool(TokenId)>& on_token, const EvalOptions& opts) {
  if (n <= 0) return Status::Ok();
  if (position() + n > max_context_)
    return invalid_argument("session: " + std::to_string(n) + " more tokens at position " + std::to_string(position()) +
                            " exceed the context limit of " + std::to_string(max_context_));
  model::Forward& fw = engine_.forward();
  const int slots = backend::Backend::kReadBackSlots;
  // Any failure after a launch may leave rows of steps in flight: rebuild from the tokens known evaluated.
  auto rebuild = [&](Status st) {
    Status rs = replay(position());
    return rs.ok() ? st : st.with_context("session state rebuilt after failure: " + rs.to_string());
  };
  const int64_t start = position();
  DS4_RETURN_IF_ERROR(fw.launch_greedy(kv_, start, first, false, exclude, 0));
  append_token(first);
  defer_logits(0);
  for (int64_t i = 0; i < n; ++i) {
    const bool cancel = opts.should_cancel && opts.should_cancel(opts.cancel_user);
    // Step i is in flight; step i+1 (fed on the device) goes in behind it before step i's token is read.
    const bool ahead = i + 1 < n && !cancel;
    if (ahead) {
      Status st = fw.launch_greedy(kv_, start + i + 1, 0, true, exclude, static_cast<int>((i + 1) % slots));
      if (!st.ok()) return rebuild(st);
      defer_logits(0);  // the last step launched holds the logits after the session's last token
    }
    TokenId t = -1;
    if (Status st = fw.finish_greedy(static_cast<int>(i % slots), &t); !st.ok()) return rebuild(st);
    if (ahead) append_token(t);  // step i+1's input, already evaluated (or being)
    const bool more = !cancel && on_token(t);
    if (!more) {
      if (ahead) {
        // Step i+1 ran past the stop: wait for it, then drop its token (the state after step i and its
        // logits come back by re-evaluating token i: rewind's cheap path).
        TokenId unused = -1;
        if (Status st = fw.finish_greedy(static_cast<int>((i + 1) % slots), &unused); !st.ok()) return rebuild(st);
        DS4_RETURN_IF_ERROR(rewind(position() - 1));
      }
      return cancel ? cancelled("session: generation cancelled after " + std::to_string(i) + " tokens") : Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace ds4::runtime
