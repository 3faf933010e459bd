// gen_request.h — the server's normalized vocabulary, shared by the API mappers (JSON -> GenRequest),
// the engine worker (GenRequest + tokens -> GenEvents) and the formatters (GenEvents -> each API's
// JSON/SSE). Plain data only: nothing here knows HTTP, JSON or the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/api_map.h"
#include "chat/chat.h"
#include "ds4/status.h"
#include "ds4/tokens.h"
#include "server/sampler.h"

namespace ds4::server {

enum class ApiKind { openai_chat, openai_completions, anthropic_messages, openai_responses };
const char* api_kind_name(ApiKind api);

// How a tool call is forced: when the answer (content) phase begins, the worker appends the DSML
// opener (and, for a named tool, the invoke header) as if the model had generated it.
using ToolForce = chat::ToolForce;

// A request after API mapping: what to render and how to generate. The Conversation is rendered and
// tokenized by the HTTP thread (render_request); the worker only sees tokens.
struct GenRequest {
  ApiKind api = ApiKind::openai_chat;
  std::string model;          // echoed back in responses
  bool raw_completion = false;  // /v1/completions: `prompt_text` is the prompt; no chat parsing
  std::string prompt_text;    // raw_completion only
  chat::Conversation conversation;
  chat::ThinkMode think = chat::ThinkMode::high;  // after aliases, effort and the 384K rule
  bool tools_enabled = false;  // tool schemas rendered: parse DSML in the output
  ToolForce tool_force;
  std::optional<int64_t> max_tokens;  // none: server default (-n), always clamped to the context
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;    // OpenAI stream_options.include_usage
  int logprobs_top = -1;         // -1: no logprobs; >= 0: logprobs with that many alternatives
  bool reasoning_summary = false;  // Responses: emit reasoning items (reasoning.summary set)
  bool ignore_eos = false;       // /v1/completions "ignore_eos" (vLLM's extension): generate max_tokens
  std::string prompt_param = "messages";  // field named in context-length errors
};

// One generated token's log-probability (only when GenRequest::logprobs_top >= 0).
struct GenTokenInfo {
  std::string text;  // the token's bytes (may be a partial UTF-8 sequence)
  TokenLogprob lp;
  std::vector<std::string> top_text;  // bytes of lp.top[i]
};

enum class FinishReason { stop, length, tool_calls, cancelled, error };
const char* finish_reason_name(FinishReason r);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens reused from the live session (no prefill)
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;   // completion tokens spent inside <think>
};

// What the worker reports to the request's channel, in order:
//   started (prompt accepted, prefill begins) -> prefill* -> (token | reasoning | content | call_*)*
//   -> done (always last; carries finish reason, usage, error status for FinishReason::error).
enum class GenEventKind { started, prefill, token, reasoning, content, call_begin, call_args, call_end, done };

struct GenEvent {
  GenEventKind kind = GenEventKind::content;
  std::string text;          // reasoning/content/call_args delta; call name for call_begin
  size_t index = 0;          // call index
  chat::ParsedCall call;     // call_begin (id + name) and call_end (id, name, full arguments)
  GenTokenInfo token;        // kind == token
  int64_t prefill_done = 0, prefill_total = 0;  // kind == prefill / started
  FinishReason finish = FinishReason::stop;
  std::string stop_sequence;  // the stop string that ended generation, if any
  Usage usage;
  Status error;              // done with FinishReason::error / cancelled
};

}  // namespace ds4::server
