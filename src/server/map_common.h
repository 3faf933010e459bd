// map_common.h — the generation fields the server reads itself, shared by the four APIs: server-level
// mapping options, model names and aliases, sampling fields, stop lists, and rejection of fields we
// cannot honour (a clear 400 instead of silently different results).
//
// Pure functions of the JSON body and the options; no I/O, no engine. Not here: anything that shapes
// the prompt (messages, tools, tool_choice, thinking): chat's api_map.h is the one mapper for those.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/gen_request.h"
#include "server/json_util.h"

namespace ds4::server {

struct MapOptions {
  int64_t ctx = 32768;                       // --ctx: the 384K Think-Max rule and limits
  std::string model_id = "deepseek-v4-flash";  // advertised id (/v1/models)
  std::vector<std::string> aliases;          // extra accepted model names (--alias)
  bool accept_any_model = false;             // ds4 behaviour: echo any name back
  chat::ThinkMode default_think = chat::ThinkMode::high;  // --think / --nothink
  chat::Flavor flavor = chat::Flavor::ds4;   // --chat-template
};

// The model ids a server answers to. What a name implies for thinking (deepseek-chat: off,
// deepseek-reasoner: on) is the request mapper's business (chat/api_common.h ThinkControl).
struct ModelName {
  std::string id;
};
std::vector<ModelName> known_models(const MapOptions& opts);

// Checks `model` (may be absent => the default) against the served names and fills out.model.
// not_found for an unknown model name unless accept_any_model.
Status resolve_model(const Json& req, const MapOptions& opts, GenRequest& out);

// temperature, top_p, top_k, min_p, seed (those the API has), max tokens fields.
Status read_sampling(const Json& req, ApiKind api, GenRequest& out);

// OpenAI `stop` (string or array) / Anthropic `stop_sequences` (array).
Status read_stop(const Json& req, const char* key, GenRequest& out);

// Fields that would silently change results if ignored: n > 1, penalties, logit_bias,
// response_format / text.format other than plain text, ... -> invalid_argument naming the field.
Status reject_unsupported(const Json& req, ApiKind api);

}  // namespace ds4::server
