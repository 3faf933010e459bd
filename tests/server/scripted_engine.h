// scripted_engine.h — a test double of the public Engine/Session/Tokenizer interfaces whose "model"
// always continues the current assistant turn with a fixed script. Lets server tests check what no
// random tiny model produces: reasoning/content splits, DSML tool calls (streamed and parsed in
// every API), exact-DSML replay, forced tool calls, stop sequences and UTF-8 split across tokens.
//
// Tokens: 0..255 are single bytes; 256.. are the special strings below (whole-string matches when
// parse_special is set). Logits are one-hot on the script's next token; after the script, EOS.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ds4/engine.h"

namespace ds4::testing {

class ScriptedEngine : public Engine {
 public:
  explicit ScriptedEngine(std::string script, int64_t max_context = 4096);
  void set_script(std::string script);
  // eval fails (internal error) once this many generated tokens are in the session (0: the prompt
  // prefill fails); -1: never.
  void fail_after(int64_t n) { fail_after_ = n; }
  int64_t fail_after_count() const { return fail_after_; }
  // Simulated compute time per evaluated token (cancellation is polled between tokens).
  void set_token_delay(std::chrono::microseconds d) { delay_ = d; }
  std::chrono::microseconds token_delay() const { return delay_; }

  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return *tok_; }
  Result<std::unique_ptr<Session>> new_session(const SessionOptions& opts = {}) override;
  MemoryReport memory_report() const override { return {}; }
  // No batching in the double: the items advance one after another.
  Status step(std::span<const StepItem> items, const EvalOptions& opts) override {
    for (const StepItem& it : items)
      DS4_RETURN_IF_ERROR(it.next ? it.session->eval_greedy(it.tokens, it.next, it.exclude, opts)
                                  : it.session->eval(it.tokens, opts));
    return Status::Ok();
  }
  int64_t max_step_tokens() const override { return 1 << 16; }

  const std::vector<TokenId>& script_tokens() const { return script_tokens_; }

 private:
  ModelInfo info_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<TokenId> script_tokens_;
  int64_t fail_after_ = -1;
  std::chrono::microseconds delay_{0};
};

}  // namespace ds4::testing
