// map_common.h — pieces of request mapping shared by the four APIs: server-level mapping options,
// model names and aliases, thinking/effort resolution (CHAT.md §5.1), sampling fields, stop lists,
// and rejection of fields we cannot honour (a clear 400 instead of silently different results).
//
// Pure functions of the JSON body and the options; no I/O, no engine.
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

// The model ids a server answers to, with what each implies for thinking.
struct ModelName {
  std::string id;
  std::optional<chat::ThinkMode> think;  // deepseek-chat: none; deepseek-reasoner: high
};
std::vector<ModelName> known_models(const MapOptions& opts);

// Resolves `model` (may be empty => the default) and the thinking mode from the request's
// explicit controls; fills out.model and out.think. not_found for an unknown model name.
Status resolve_model_and_thinking(const Json& req, ApiKind api, const MapOptions& opts, GenRequest& out);

// temperature, top_p, top_k, min_p, seed (those the API has), max tokens fields.
Status read_sampling(const Json& req, ApiKind api, GenRequest& out);

// OpenAI `stop` (string or array) / Anthropic `stop_sequences` (array).
Status read_stop(const Json& req, const char* key, GenRequest& out);

// Fields that would silently change results if ignored: n > 1, penalties, logit_bias,
// response_format / text.format other than plain text, ... -> invalid_argument naming the field.
Status reject_unsupported(const Json& req, ApiKind api);

// Maps an effort name; nullopt for JSON null; invalid_argument for unknown names.
Result<std::optional<chat::ThinkMode>> parse_effort(const Json& v, std::string_view field);

}  // namespace ds4::server
