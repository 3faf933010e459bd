// api_error.h — errors in each API's own shape (DS4_SERVER.md §2.6): OpenAI
// {"error":{"message","type","param","code"}}, Anthropic {"type":"error","error":{"type","message"}}.
// Pure mapping from a Status (or an explicit kind) to an HTTP status and a JSON body.
#pragma once

#include <string>

#include "server/gen_request.h"
#include "server/json_util.h"

namespace ds4::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string param;  // OpenAI `param` (may be empty)
  std::string code;   // OpenAI `code` (may be empty)
  Json extra = Json::object();  // extra fields merged into the error object (n_prompt_tokens, ...)
};

// invalid_argument/invalid_data -> 400, not_found -> 404, unavailable -> 503, cancelled -> 499,
// out_of_memory/internal/... -> 500.
ApiError api_error_from_status(const Status& st);

// "anthropic" shape for ApiKind::anthropic_messages, OpenAI shape otherwise.
Json api_error_body(ApiKind api, const ApiError& err);

// The prompt does not fit: 400 context_length_exceeded with n_prompt_tokens / n_ctx.
ApiError context_length_error(int64_t n_prompt, int64_t n_ctx, const std::string& param);

}  // namespace ds4::server
