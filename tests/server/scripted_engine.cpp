// scripted_engine.cpp — see scripted_engine.h.
#include "scripted_engine.h"

#include <algorithm>
#include <thread>

namespace ds4::testing {

namespace {

const std::vector<std::string>& specials() {
  static const std::vector<std::string> s = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                                             "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜"};
  return s;
}
constexpr TokenId kBos = 256, kEos = 257, kAssistant = 259, kThink = 260, kThinkClose = 261;

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts) const override {
    std::vector<TokenId> out;
    if (opts.add_bos) out.push_back(kBos);
    size_t i = 0;
    while (i < text.size()) {
      bool matched = false;
      if (opts.parse_special) {
        for (size_t k = 0; k < specials().size(); ++k) {
          const std::string& s = specials()[k];
          if (text.compare(i, s.size(), s) == 0) {
            out.push_back(static_cast<TokenId>(256 + k));
            i += s.size();
            matched = true;
            break;
          }
        }
      }
      if (!matched) out.push_back(static_cast<unsigned char>(text[i++]));
    }
    return out;
  }
  std::string decode(std::span<const TokenId> ids) const override {
    std::string s;
    for (TokenId id : ids) s += token_bytes(id);
    return s;
  }
  std::string token_bytes(TokenId id) const override {
    if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
    if (id >= 256 && id < 256 + static_cast<TokenId>(specials().size())) return specials()[id - 256];
    return {};
  }
  std::string_view token_text(TokenId id) const override {
    if (id >= 256 && id < 256 + static_cast<TokenId>(specials().size())) return specials()[id - 256];
    return {};
  }
  int32_t vocab_size() const override { return 256 + static_cast<int32_t>(specials().size()); }
  TokenId bos_id() const override { return kBos; }
  TokenId eos_id() const override { return kEos; }
  TokenId special_id(std::string_view text) const override {
    for (size_t k = 0; k < specials().size(); ++k)
      if (specials()[k] == text) return static_cast<TokenId>(256 + k);
    return -1;
  }
  bool is_special(TokenId id) const override { return id >= 256; }
  size_t memory_bytes() const override { return 0; }
};

class ScriptedSession : public Session {
 public:
  ScriptedSession(const ScriptedEngine& engine, int64_t max_ctx) : engine_(engine), max_ctx_(max_ctx) {
    logits_.assign(engine.tokenizer().vocab_size(), 0.0f);
  }
  Status eval(std::span<const TokenId> tokens, const EvalOptions& opts) override {
    if (position() + static_cast<int64_t>(tokens.size()) > max_ctx_) return invalid_argument("context full");
    for (TokenId t : tokens) {
      if (opts.should_cancel && opts.should_cancel(opts.cancel_user)) return cancelled("cancelled");
      if (engine_.token_delay().count() > 0) std::this_thread::sleep_for(engine_.token_delay());
      tokens_.push_back(t);
    }
    update_logits();
    if (engine_.fail_after_count() >= 0 && generated_ >= engine_.fail_after_count())
      return internal_error("scripted backend failure");
    return Status::Ok();
  }
  Status eval_all(std::span<const TokenId> tokens, std::vector<float>&, const EvalOptions& opts) override {
    return eval(tokens, opts);
  }
  std::span<const float> logits() const override { return logits_; }
  std::span<const TokenId> tokens() const override { return tokens_; }
  int64_t max_context() const override { return max_ctx_; }
  Status rewind(int64_t n) override {
    if (n < 0 || n > position()) return invalid_argument("rewind past the end");
    tokens_.resize(static_cast<size_t>(n));
    update_logits();
    return Status::Ok();
  }
  Result<SessionSnapshot> snapshot(SnapshotFormat) const override { return unsupported("scripted session has no snapshot"); }
  Status restore(const SessionSnapshot&) override { return unsupported("scripted session has no snapshot"); }
  SessionMemory memory() const override { return {}; }

 private:
  // The script continues the last assistant turn: count tokens after <｜Assistant｜>(<think>|</think>).
  void update_logits() {
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    auto it = std::find(tokens_.rbegin(), tokens_.rend(), kAssistant);
    size_t start = it == tokens_.rend() ? tokens_.size() : static_cast<size_t>(tokens_.rend() - it);
    if (start < tokens_.size() && (tokens_[start] == kThink || tokens_[start] == kThinkClose)) ++start;
    const size_t generated = tokens_.size() - std::min(start, tokens_.size());
    generated_ = static_cast<int64_t>(generated);
    const auto& script = engine_.script_tokens();
    const TokenId next = generated < script.size() ? script[generated] : kEos;
    logits_[next] = 20.0f;
  }
  const ScriptedEngine& engine_;
  int64_t max_ctx_;
  std::vector<TokenId> tokens_;
  std::vector<float> logits_;
  int64_t generated_ = 0;
};

}  // namespace

ScriptedEngine::ScriptedEngine(std::string script, int64_t max_context) : tok_(std::make_unique<ByteTokenizer>()) {
  info_.name = "scripted";
  info_.architecture = "test";
  info_.max_context = max_context;
  info_.context_length = max_context;
  info_.n_vocab = tok_->vocab_size();
  set_script(std::move(script));
}

void ScriptedEngine::set_script(std::string script) {
  EncodeOptions enc;
  enc.parse_special = true;
  script_tokens_ = tok_->encode(script, enc);
}

Result<std::unique_ptr<Session>> ScriptedEngine::new_session(const SessionOptions& opts) {
  return std::unique_ptr<Session>(
      std::make_unique<ScriptedSession>(*this, opts.max_context > 0 ? opts.max_context : info_.max_context));
}

}  // namespace ds4::testing
