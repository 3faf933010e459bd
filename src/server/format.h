// format.h — GenEvents -> each API's response: the non-streaming JSON body and the SSE stream, in
// the API's native shapes (OpenAI chat/completions, Anthropic messages, OpenAI Responses).
//
// Pure: a Formatter is a state machine fed the worker's events in order. It knows nothing about
// sockets; the transport writes whatever bytes on_event() returns. Error bodies (before any
// output) are in api_error.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/gen_request.h"
#include "server/json_util.h"

namespace ds4::server {

struct FormatContext {
  std::string id;        // response id: chatcmpl-…, cmpl-…, msg_…, resp_…
  int64_t created = 0;   // unix seconds
  std::string model;     // echoed model name
};

// Everything generated so far, gathered from events (both modes use it).
struct Accumulated {
  std::string reasoning, content;
  struct Call {
    std::string id, name, arguments;
    bool complete = false;
  };
  std::vector<Call> calls;
  std::vector<GenTokenInfo> tokens;  // logprobs, when requested
  FinishReason finish = FinishReason::stop;
  std::string stop_sequence;
  Usage usage;
  Status error;
  bool done = false;

  void add(const GenEvent& ev);
};

class Formatter {
 public:
  virtual ~Formatter() = default;
  // Streaming: the SSE bytes to send for this event ("" when nothing is due).
  virtual std::string on_event(const GenEvent& ev) = 0;
  // Non-streaming: the response body after the done event.
  virtual Json final_json() const = 0;
  // HTTP status for a non-streaming response that ended with an error before any text.
  const Accumulated& result() const { return acc_; }

 protected:
  Accumulated acc_;
};

std::unique_ptr<Formatter> make_formatter(const GenRequest& req, const FormatContext& ctx);

// SSE framing helpers.
std::string sse_data(const Json& j);                          // "data: {...}\n\n"
std::string sse_event(const std::string& name, const Json& j);  // "event: name\ndata: {...}\n\n"

// Usage objects in each API's shape.
Json openai_usage(const Usage& u);
Json anthropic_usage(const Usage& u, bool include_input);
Json responses_usage(const Usage& u);

// Arguments text -> JSON value for Anthropic tool_use.input (falls back to {} for non-JSON text).
Json parse_arguments(const std::string& args);

}  // namespace ds4::server
