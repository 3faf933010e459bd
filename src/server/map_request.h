// map_request.h — request JSON -> GenRequest for each API (CHAT.md §5.2-5.5, DS4_SERVER.md §2.3).
//
// The prompt (messages, system/instructions, tools, tool_choice, thinking) comes from chat's one
// request mapper (chat/api_map.h); this adds what only the server reads: the served model name,
// sampling, limits, stop lists, streaming, logprobs and the fields it refuses (map_common.h).
// Pure: no engine, no tokenizer, no HTTP. Every failure is a Status whose message says which field
// was wrong; map_request never throws (a stray JSON type error becomes invalid_argument).
#pragma once

#include "server/gen_request.h"
#include "server/json_util.h"
#include "server/map_common.h"

namespace ds4::server {

// `raw_body` is the request bytes `body` was parsed from: the conversation keeps the client's raw
// JSON bytes where ds4 renders them verbatim. Empty: `body` is re-serialised.
Result<GenRequest> map_request(ApiKind api, const Json& body, const MapOptions& opts,
                               std::string_view raw_body = {});

}  // namespace ds4::server
