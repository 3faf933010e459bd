// format_responses.cpp — OpenAI Responses shapes (DS4_SERVER.md §2.4-2.5): output items reasoning
// (only when reasoning.summary was requested), message (output_text) and function_call; streaming
// events carry sequence_number; function-call arguments stream as deltas while generated.
#include "server/format.h"

#include "server/text_util.h"

namespace ds4::server {

namespace {

class ResponsesFormatter : public Formatter {
 public:
  ResponsesFormatter(const GenRequest& req, FormatContext ctx)
      : summary_(req.reasoning_summary), ctx_(std::move(ctx)) {}

  std::string on_event(const GenEvent& ev) override {
    acc_.add(ev);
    std::string out;
    switch (ev.kind) {
      case GenEventKind::started: {
        Json r = response_json("in_progress");
        out += emit("response.created", {{"response", r}});
        out += emit("response.in_progress", {{"response", r}});
        break;
      }
      case GenEventKind::reasoning:
        if (!summary_) break;
        if (open_ != Item::reasoning) {
          out += close_item();
          open_item(Item::reasoning, out);
        }
        items_.back().text += ev.text;
        out += emit("response.reasoning_summary_text.delta",
                    {{"item_id", items_.back().id}, {"output_index", items_.size() - 1}, {"summary_index", 0},
                     {"delta", ev.text}});
        break;
      case GenEventKind::content:
        if (open_ != Item::message) {
          out += close_item();
          open_item(Item::message, out);
        }
        items_.back().text += ev.text;
        out += emit("response.output_text.delta", {{"item_id", items_.back().id}, {"output_index", items_.size() - 1},
                                                   {"content_index", 0}, {"delta", ev.text}, {"logprobs", Json::array()}});
        break;
      case GenEventKind::call_begin:
        out += close_item();
        open_item(Item::call, out, ev.call.id, ev.call.name);
        break;
      case GenEventKind::call_args:
        if (open_ == Item::call) {
          items_.back().text += ev.text;
          out += emit("response.function_call_arguments.delta",
                      {{"item_id", items_.back().id}, {"output_index", items_.size() - 1}, {"delta", ev.text}});
        }
        break;
      case GenEventKind::call_end:
        if (open_ == Item::call) {
          items_.back().text = ev.call.arguments;
          out += close_item();
        }
        break;
      case GenEventKind::done: {
        if (ev.finish == FinishReason::error || ev.finish == FinishReason::cancelled) {
          out += close_item();
          out += emit("error", {{"code", "server_error"}, {"message", ev.error.message()}, {"param", nullptr}});
          out += emit("response.failed", {{"response", response_json("failed")}});
          return out;
        }
        out += close_item();
        const bool incomplete = ev.finish == FinishReason::length;
        out += emit(incomplete ? "response.incomplete" : "response.completed",
                    {{"response", response_json(incomplete ? "incomplete" : "completed")}});
        break;
      }
      default:
        break;
    }
    return out;
  }

  Json final_json() const override {
    // Non-streaming too: the transport feeds every event through on_event, which built items_.
    const char* status = acc_.finish == FinishReason::length ? "incomplete"
                         : acc_.finish == FinishReason::error ? "failed" : "completed";
    return response_json(status);
  }

 private:
  enum class Item { none, reasoning, message, call };
  struct OutItem {
    Item kind;
    std::string id, text, call_id, name;
    bool done = false;
  };

  Json item_json(const OutItem& it) const {
    const char* status = it.done ? "completed" : "in_progress";
    switch (it.kind) {
      case Item::reasoning:
        return {{"id", it.id}, {"type", "reasoning"},
                {"summary", Json::array({{{"type", "summary_text"}, {"text", it.text}}})}};
      case Item::message:
        return {{"id", it.id}, {"type", "message"}, {"status", status}, {"role", "assistant"},
                {"content", Json::array({{{"type", "output_text"}, {"text", it.text}, {"annotations", Json::array()}}})}};
      case Item::call:
        return {{"id", it.id}, {"type", "function_call"}, {"status", status}, {"call_id", it.call_id},
                {"name", it.name}, {"arguments", it.text}};
      default:
        return Json::object();
    }
  }

  Json response_json(const char* status) const {
    Json output = Json::array();
    for (const auto& it : items_)
      if (it.done) output.push_back(item_json(it));
    Json r = {{"id", ctx_.id}, {"object", "response"}, {"created_at", ctx_.created}, {"status", status},
              {"model", ctx_.model}, {"output", std::move(output)}, {"parallel_tool_calls", true},
              {"error", nullptr}, {"incomplete_details", nullptr}};
    if (std::string(status) == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (std::string(status) == "failed")
      r["error"] = {{"code", "server_error"}, {"message", acc_.error.message()}};
    if (acc_.done) r["usage"] = responses_usage(acc_.usage);
    else r["usage"] = nullptr;
    return r;
  }

  std::string emit(const std::string& type, Json body) {
    Json j = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : body.items()) j[k] = v;
    return sse_event(type, j);
  }

  void open_item(Item kind, std::string& out, const std::string& call_id = {}, const std::string& name = {}) {
    const char* prefix = kind == Item::reasoning ? "rs_" : kind == Item::message ? "msg_" : "fc_";
    items_.push_back({kind, random_id(prefix), "", call_id, name, false});
    open_ = kind;
    const size_t idx = items_.size() - 1;
    Json item = item_json(items_.back());
    if (kind == Item::reasoning) item["summary"] = Json::array();
    if (kind == Item::message) item["content"] = Json::array();
    out += emit("response.output_item.added", {{"output_index", idx}, {"item", item}});
    if (kind == Item::reasoning)
      out += emit("response.reasoning_summary_part.added", {{"item_id", items_.back().id}, {"output_index", idx},
                                                            {"summary_index", 0}, {"part", {{"type", "summary_text"}, {"text", ""}}}});
    if (kind == Item::message)
      out += emit("response.content_part.added",
                  {{"item_id", items_.back().id}, {"output_index", idx}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
  }

  std::string close_item() {
    if (open_ == Item::none) return {};
    std::string out;
    OutItem& it = items_.back();
    const size_t idx = items_.size() - 1;
    if (it.kind == Item::reasoning) {
      out += emit("response.reasoning_summary_text.done",
                  {{"item_id", it.id}, {"output_index", idx}, {"summary_index", 0}, {"text", it.text}});
      out += emit("response.reasoning_summary_part.done", {{"item_id", it.id}, {"output_index", idx}, {"summary_index", 0},
                                                           {"part", {{"type", "summary_text"}, {"text", it.text}}}});
    } else if (it.kind == Item::message) {
      out += emit("response.output_text.done", {{"item_id", it.id}, {"output_index", idx}, {"content_index", 0},
                                                {"text", it.text}, {"logprobs", Json::array()}});
      out += emit("response.content_part.done",
                  {{"item_id", it.id}, {"output_index", idx}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", it.text}, {"annotations", Json::array()}}}});
    } else if (it.kind == Item::call) {
      out += emit("response.function_call_arguments.done",
                  {{"item_id", it.id}, {"output_index", idx}, {"arguments", it.text}});
    }
    it.done = true;
    out += emit("response.output_item.done", {{"output_index", idx}, {"item", item_json(it)}});
    open_ = Item::none;
    return out;
  }

  bool summary_;
  FormatContext ctx_;
  std::vector<OutItem> items_;
  Item open_ = Item::none;
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Formatter> make_responses_formatter(const GenRequest& req, const FormatContext& ctx) {
  return std::make_unique<ResponsesFormatter>(req, ctx);
}

std::unique_ptr<Formatter> make_openai_formatter(const GenRequest& req, const FormatContext& ctx);
std::unique_ptr<Formatter> make_anthropic_formatter(const GenRequest& req, const FormatContext& ctx);

std::unique_ptr<Formatter> make_formatter(const GenRequest& req, const FormatContext& ctx) {
  switch (req.api) {
    case ApiKind::openai_chat:
    case ApiKind::openai_completions: return make_openai_formatter(req, ctx);
    case ApiKind::anthropic_messages: return make_anthropic_formatter(req, ctx);
    case ApiKind::openai_responses: return make_responses_formatter(req, ctx);
  }
  return make_openai_formatter(req, ctx);
}

}  // namespace ds4::server
