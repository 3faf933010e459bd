// format_openai.cpp — OpenAI chat.completion(.chunk) and text_completion shapes (DS4_SERVER.md
// §2.4-2.5). Reasoning goes to `reasoning_content`, separate from `content`; tool calls stream as
// soon as the invoke header is parsed, then their arguments as deltas.
#include "server/format.h"

namespace ds4::server {

namespace {

struct FormatFlags {  // the few request options the OpenAI shapes depend on
  bool include_usage = false;
  int logprobs_top = -1;
};

Json bytes_array(const std::string& s) {
  Json a = Json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Token bytes may end mid UTF-8 character; JSON strings must be valid, so repair for display.
std::string display(const std::string& s) {
  Json j = s;
  return Json::parse(j.dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
}

Json chat_logprob_entry(const GenTokenInfo& t) {
  Json e = {{"token", display(t.text)}, {"logprob", t.lp.logprob}, {"bytes", bytes_array(t.text)}};
  Json top = Json::array();
  for (size_t i = 0; i < t.lp.top.size(); ++i) {
    const std::string& tt = i < t.top_text.size() ? t.top_text[i] : std::string();
    top.push_back({{"token", display(tt)}, {"logprob", t.lp.top[i].logprob}, {"bytes", bytes_array(tt)}});
  }
  e["top_logprobs"] = std::move(top);
  return e;
}

const char* openai_finish(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
    default: return "error";  // ds4's non-standard reason for a failed generation
  }
}

Json error_object(const Status& st) {
  return {{"error", {{"message", st.message().empty() ? st.to_string() : st.message()},
                     {"type", "server_error"}, {"param", nullptr}, {"code", status_code_name(st.code())}}}};
}

class ChatFormatter : public Formatter {
 public:
  ChatFormatter(const GenRequest& req, FormatContext ctx)
      : req_{.include_usage = req.include_usage, .logprobs_top = req.logprobs_top}, ctx_(std::move(ctx)) {}

  std::string on_event(const GenEvent& ev) override {
    acc_.add(ev);
    switch (ev.kind) {
      case GenEventKind::started:
        return chunk({{"role", "assistant"}, {"content", ""}});
      case GenEventKind::prefill:
        return {};
      case GenEventKind::token: {
        Json c = chunk_json(Json::object());
        c["choices"][0]["logprobs"] = {{"content", Json::array({chat_logprob_entry(ev.token)})}};
        return sse_data(c);
      }
      case GenEventKind::reasoning:
        return chunk({{"reasoning_content", ev.text}});
      case GenEventKind::content:
        return chunk({{"content", ev.text}});
      case GenEventKind::call_begin:
        return chunk({{"tool_calls", Json::array({{{"index", ev.index},
                                                   {"id", ev.call.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", ev.call.name}, {"arguments", ""}}}}})}});
      case GenEventKind::call_args:
        return chunk({{"tool_calls", Json::array({{{"index", ev.index}, {"function", {{"arguments", ev.text}}}}})}});
      case GenEventKind::call_end:
        return {};
      case GenEventKind::done: {
        std::string out;
        if (ev.finish == FinishReason::error || ev.finish == FinishReason::cancelled)
          out += sse_data(error_object(ev.error));  // cancelled: only a draining server still has a reader
        Json c = chunk_json(Json::object());
        c["choices"][0]["finish_reason"] = openai_finish(ev.finish);
        out += sse_data(c);
        if (req_.include_usage) {
          Json u = chunk_json(Json::object());
          u["choices"] = Json::array();
          u["usage"] = openai_usage(acc_.usage);
          out += sse_data(u);
        }
        out += "data: [DONE]\n\n";
        return out;
      }
    }
    return {};
  }

  Json final_json() const override {
    Json msg = {{"role", "assistant"}};
    msg["content"] = acc_.content.empty() && !acc_.calls.empty() ? Json(nullptr) : Json(acc_.content);
    if (!acc_.reasoning.empty()) msg["reasoning_content"] = acc_.reasoning;
    if (!acc_.calls.empty()) {
      Json calls = Json::array();
      for (const auto& c : acc_.calls)
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      msg["tool_calls"] = std::move(calls);
    }
    Json choice = {{"index", 0}, {"message", std::move(msg)}, {"logprobs", nullptr},
                   {"finish_reason", openai_finish(acc_.finish)}};
    if (req_.logprobs_top >= 0) {
      Json content = Json::array();
      for (const auto& t : acc_.tokens) content.push_back(chat_logprob_entry(t));
      choice["logprobs"] = {{"content", std::move(content)}};
    }
    return {{"id", ctx_.id},         {"object", "chat.completion"}, {"created", ctx_.created},
            {"model", ctx_.model},   {"choices", Json::array({std::move(choice)})},
            {"usage", openai_usage(acc_.usage)}, {"system_fingerprint", "ds4cpp"}};
  }

 private:
  Json chunk_json(Json delta) const {
    return {{"id", ctx_.id},
            {"object", "chat.completion.chunk"},
            {"created", ctx_.created},
            {"model", ctx_.model},
            {"system_fingerprint", "ds4cpp"},
            {"choices", Json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                                      {"finish_reason", nullptr}}})}};
  }
  std::string chunk(Json delta) const { return sse_data(chunk_json(std::move(delta))); }

  FormatFlags req_;
  FormatContext ctx_;
};

class CompletionFormatter : public Formatter {
 public:
  CompletionFormatter(const GenRequest& req, FormatContext ctx)
      : req_{.include_usage = req.include_usage, .logprobs_top = req.logprobs_top}, ctx_(std::move(ctx)) {}

  std::string on_event(const GenEvent& ev) override {
    acc_.add(ev);
    switch (ev.kind) {
      case GenEventKind::content:
        return sse_data(chunk_json(ev.text, nullptr, nullptr));
      case GenEventKind::token: {
        GenTokenInfo t = ev.token;
        std::string out = sse_data(chunk_json("", logprobs_json(std::span<const GenTokenInfo>(&t, 1), offset_), nullptr));
        offset_ += static_cast<int64_t>(t.text.size());
        return out;
      }
      case GenEventKind::done: {
        std::string out;
        if (ev.finish == FinishReason::error || ev.finish == FinishReason::cancelled)
          out += sse_data(error_object(ev.error));  // cancelled: only a draining server still has a reader
        out += sse_data(chunk_json("", nullptr, openai_finish(ev.finish)));
        if (req_.include_usage) {
          Json u = chunk_json("", nullptr, nullptr);
          u["choices"] = Json::array();
          u["usage"] = openai_usage(acc_.usage);
          out += sse_data(u);
        }
        out += "data: [DONE]\n\n";
        return out;
      }
      default:
        return {};
    }
  }

  Json final_json() const override {
    Json choice = {{"index", 0}, {"text", acc_.content}, {"logprobs", nullptr},
                   {"finish_reason", openai_finish(acc_.finish)}};
    if (req_.logprobs_top >= 0) choice["logprobs"] = logprobs_json(acc_.tokens, 0);
    return {{"id", ctx_.id}, {"object", "text_completion"}, {"created", ctx_.created}, {"model", ctx_.model},
            {"choices", Json::array({std::move(choice)})}, {"usage", openai_usage(acc_.usage)},
            {"system_fingerprint", "ds4cpp"}};
  }

 private:
  Json logprobs_json(std::span<const GenTokenInfo> toks, int64_t start_offset) const {
    Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    int64_t off = start_offset;
    for (const auto& t : toks) {
      tokens.push_back(display(t.text));
      lps.push_back(t.lp.logprob);
      Json top = Json::object();
      for (size_t i = 0; i < t.lp.top.size(); ++i)
        top[display(i < t.top_text.size() ? t.top_text[i] : std::string())] = t.lp.top[i].logprob;
      tops.push_back(std::move(top));
      offsets.push_back(off);
      off += static_cast<int64_t>(t.text.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }
  Json chunk_json(const std::string& text, Json logprobs, Json finish) {
    return {{"id", ctx_.id}, {"object", "text_completion"}, {"created", ctx_.created}, {"model", ctx_.model},
            {"choices", Json::array({{{"index", 0}, {"text", text}, {"logprobs", std::move(logprobs)},
                                      {"finish_reason", std::move(finish)}}})}};
  }
  FormatFlags req_;
  FormatContext ctx_;
  int64_t offset_ = 0;
};

}  // namespace

std::unique_ptr<Formatter> make_openai_formatter(const GenRequest& req, const FormatContext& ctx) {
  if (req.api == ApiKind::openai_completions) return std::make_unique<CompletionFormatter>(req, ctx);
  return std::make_unique<ChatFormatter>(req, ctx);
}

}  // namespace ds4::server
