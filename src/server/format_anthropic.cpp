// format_anthropic.cpp — Anthropic Messages shapes (DS4_SERVER.md §2.4-2.5): content blocks
// thinking (with a signature) / text / tool_use; streaming as message_start, content_block_start /
// delta / stop, message_delta, message_stop. A tool_use block opens as soon as the invoke header is
// parsed and its input streams as input_json_delta.
#include "server/format.h"

namespace ds4::server {

namespace {

const char* stop_reason(const Accumulated& acc) {
  switch (acc.finish) {
    case FinishReason::length: return "max_tokens";
    case FinishReason::tool_calls: return "tool_use";
    case FinishReason::stop: return acc.stop_sequence.empty() ? "end_turn" : "stop_sequence";
    default: return "end_turn";
  }
}

class AnthropicFormatter : public Formatter {
 public:
  explicit AnthropicFormatter(FormatContext ctx) : ctx_(std::move(ctx)) {}

  std::string on_event(const GenEvent& ev) override {
    acc_.add(ev);
    std::string out;
    switch (ev.kind) {
      case GenEventKind::started: {
        Json msg = message_shell();
        msg["usage"] = anthropic_usage(acc_.usage, true);
        out += sse_event("message_start", {{"type", "message_start"}, {"message", std::move(msg)}});
        break;
      }
      case GenEventKind::reasoning:
        if (open_ != Block::thinking) {
          out += close_block();
          out += open_block(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        }
        out += delta({{"type", "thinking_delta"}, {"thinking", ev.text}});
        break;
      case GenEventKind::content:
        if (open_ != Block::text) {
          out += close_block();
          out += open_block(Block::text, {{"type", "text"}, {"text", ""}});
        }
        out += delta({{"type", "text_delta"}, {"text", ev.text}});
        break;
      case GenEventKind::call_begin:
        out += close_block();
        out += open_block(Block::tool, {{"type", "tool_use"}, {"id", ev.call.id}, {"name", ev.call.name},
                                        {"input", Json::object()}});
        break;
      case GenEventKind::call_args:
        if (open_ == Block::tool) out += delta({{"type", "input_json_delta"}, {"partial_json", ev.text}});
        break;
      case GenEventKind::call_end:
        out += close_block();
        break;
      case GenEventKind::done:
        if (ev.finish == FinishReason::error || ev.finish == FinishReason::cancelled) {
          out += sse_event("error", {{"type", "error"},
                                     {"error", {{"type", "api_error"}, {"message", ev.error.message()}}}});
          return out;
        }
        out += close_block();
        out += sse_event("message_delta",
                         {{"type", "message_delta"},
                          {"delta", {{"stop_reason", stop_reason(acc_)},
                                     {"stop_sequence", acc_.stop_sequence.empty() ? Json(nullptr) : Json(acc_.stop_sequence)}}},
                          {"usage", anthropic_usage(acc_.usage, true)}});
        out += sse_event("message_stop", {{"type", "message_stop"}});
        break;
      default:
        break;
    }
    return out;
  }

  Json final_json() const override {
    Json msg = message_shell();
    Json content = Json::array();
    if (!acc_.reasoning.empty())
      content.push_back({{"type", "thinking"}, {"thinking", acc_.reasoning}, {"signature", ctx_.id}});
    if (!acc_.content.empty()) content.push_back({{"type", "text"}, {"text", acc_.content}});
    for (const auto& c : acc_.calls)
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", parse_arguments(c.arguments)}});
    msg["content"] = std::move(content);
    msg["stop_reason"] = stop_reason(acc_);
    msg["stop_sequence"] = acc_.stop_sequence.empty() ? Json(nullptr) : Json(acc_.stop_sequence);
    msg["usage"] = anthropic_usage(acc_.usage, true);
    return msg;
  }

 private:
  enum class Block { none, thinking, text, tool };

  Json message_shell() const {
    return {{"id", ctx_.id}, {"type", "message"}, {"role", "assistant"}, {"model", ctx_.model},
            {"content", Json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
  }
  std::string open_block(Block b, Json block) {
    open_ = b;
    return sse_event("content_block_start",
                     {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
  }
  std::string delta(Json d) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  }
  std::string close_block() {
    if (open_ == Block::none) return {};
    std::string out;
    // Clients that replay thinking blocks need a signature; ours is the response id.
    if (open_ == Block::thinking) out += delta({{"type", "signature_delta"}, {"signature", ctx_.id}});
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_ = Block::none;
    ++index_;
    return out;
  }

  FormatContext ctx_;
  Block open_ = Block::none;
  int index_ = 0;
};

}  // namespace

std::unique_ptr<Formatter> make_anthropic_formatter(const GenRequest&, const FormatContext& ctx) {
  return std::make_unique<AnthropicFormatter>(ctx);
}

}  // namespace ds4::server
