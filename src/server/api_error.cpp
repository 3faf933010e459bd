// api_error.cpp — see api_error.h.
#include "server/api_error.h"

namespace ds4::server {

ApiError api_error_from_status(const Status& st) {
  ApiError e;
  e.message = st.message().empty() ? st.to_string() : st.message();
  switch (st.code()) {
    case StatusCode::invalid_argument:
    case StatusCode::invalid_data:
    case StatusCode::unsupported: e.http_status = 400; break;
    case StatusCode::not_found: e.http_status = 404; e.code = "model_not_found"; break;
    case StatusCode::unavailable: e.http_status = 503; break;
    case StatusCode::cancelled: e.http_status = 499; break;
    default: e.http_status = 500; break;
  }
  return e;
}

static const char* openai_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

static const char* anthropic_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

Json api_error_body(ApiKind api, const ApiError& err) {
  if (api == ApiKind::anthropic_messages) {
    Json e = {{"type", anthropic_type(err.http_status)}, {"message", err.message}};
    for (auto& [k, v] : err.extra.items()) e[k] = v;
    return {{"type", "error"}, {"error", std::move(e)}};
  }
  Json e = {{"message", err.message},
            {"type", openai_type(err.http_status)},
            {"param", err.param.empty() ? Json(nullptr) : Json(err.param)},
            {"code", err.code.empty() ? Json(nullptr) : Json(err.code)}};
  for (auto& [k, v] : err.extra.items()) e[k] = v;
  return {{"error", std::move(e)}};
}

ApiError context_length_error(int64_t n_prompt, int64_t n_ctx, const std::string& param) {
  ApiError e;
  e.http_status = 400;
  e.message = "Prompt has " + std::to_string(n_prompt) + " tokens, but the configured context size is " +
              std::to_string(n_ctx) + " tokens";
  e.param = param;
  e.code = "context_length_exceeded";
  e.extra = {{"n_prompt_tokens", n_prompt}, {"n_ctx", n_ctx}};
  return e;
}

}  // namespace ds4::server
