// map_request.h — request JSON -> GenRequest for each API (CHAT.md §5.2-5.5, DS4_SERVER.md §2.3).
//
// Pure: no engine, no tokenizer, no HTTP. Every failure is a Status whose message says which field
// was wrong; map_request never throws (a stray JSON type error becomes invalid_argument).
#pragma once

#include "server/gen_request.h"
#include "server/json_util.h"
#include "server/map_common.h"

namespace ds4::server {

// `raw_body` (the request bytes `body` was parsed from) lets the conversation keep the client's raw
// JSON bytes where ds4 renders them verbatim; empty: use the re-serialised values.
Result<GenRequest> map_request(ApiKind api, const Json& body, const MapOptions& opts,
                               std::string_view raw_body = {});

Result<GenRequest> map_chat_completions(const Json& body, const MapOptions& opts);
Result<GenRequest> map_completions(const Json& body, const MapOptions& opts);
Result<GenRequest> map_anthropic_messages(const Json& body, const MapOptions& opts);
Result<GenRequest> map_responses(const Json& body, const MapOptions& opts);

// Shared content helpers.
// OpenAI message content: string, null, or an array of strings / {"type":"text","text":...} parts
// (concatenated). Image/audio/file parts are rejected (silently dropping them changes the answer).
Result<std::string> flatten_openai_content(const Json& content, std::string_view what);
// Function object text for the official flavor: {"name","description","parameters"} in that order.
std::string function_object_text(const std::string& name, const Json* description, const Json* parameters);

}  // namespace ds4::server
