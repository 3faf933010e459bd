// map_common.cpp — see map_common.h.
#include "server/map_common.h"

#include <algorithm>

namespace ds4::server {

const char* api_kind_name(ApiKind api) {
  switch (api) {
    case ApiKind::openai_chat: return "chat.completions";
    case ApiKind::openai_completions: return "completions";
    case ApiKind::anthropic_messages: return "messages";
    case ApiKind::openai_responses: return "responses";
  }
  return "?";
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::error: return "error";
  }
  return "?";
}

std::vector<ModelName> known_models(const MapOptions& opts) {
  std::vector<ModelName> out;
  for (const char* id : {opts.model_id.c_str(), "deepseek-v4-flash", "deepseek-chat", "deepseek-reasoner"})
    out.push_back({id});
  for (const auto& a : opts.aliases) out.push_back({a});
  return out;
}

Status resolve_model(const Json& req, const MapOptions& opts, GenRequest& out) {
  std::string model;
  DS4_RETURN_IF_ERROR(read_string(req, "model", model));
  if (model.empty()) {
    out.model = opts.model_id;
    return Status::Ok();
  }
  const std::vector<ModelName> known = known_models(opts);
  const bool found = std::any_of(known.begin(), known.end(), [&](const ModelName& m) { return m.id == model; });
  if (!found && !opts.accept_any_model) {
    std::string names;
    for (const auto& m : known) names += (names.empty() ? "" : ", ") + m.id;
    return not_found("model '" + model + "' does not exist; this server serves: " + names);
  }
  out.model = model;
  return Status::Ok();
}

Status read_sampling(const Json& req, ApiKind api, GenRequest& out) {
  std::optional<double> t, p, minp;
  std::optional<int64_t> k, max_tokens, seed;
  DS4_RETURN_IF_ERROR(read_number(req, "temperature", t));
  DS4_RETURN_IF_ERROR(read_number(req, "top_p", p));
  if (t && (*t < 0 || *t > 2)) return invalid_argument("'temperature' must be between 0 and 2");
  if (p && (*p <= 0 || *p > 1)) return invalid_argument("'top_p' must be in (0, 1]");
  if (t) out.sampling.temperature = static_cast<float>(*t);
  if (p) out.sampling.top_p = static_cast<float>(*p);
  if (api != ApiKind::openai_responses) {
    DS4_RETURN_IF_ERROR(read_int(req, "top_k", k));
    if (k && *k < 0) return invalid_argument("'top_k' must be >= 0");
    if (k) out.sampling.top_k = static_cast<int32_t>(std::min<int64_t>(*k, 1 << 30));
  }
  if (api == ApiKind::openai_chat || api == ApiKind::openai_completions) {
    DS4_RETURN_IF_ERROR(read_number(req, "min_p", minp));
    if (minp && (*minp < 0 || *minp > 1)) return invalid_argument("'min_p' must be in [0, 1]");
    if (minp) out.sampling.min_p = static_cast<float>(*minp);
    if (auto it = req.find("seed"); it != req.end() && !it->is_null()) {
      if (it->is_number_unsigned()) out.sampling.seed = it->get<uint64_t>();
      else if (it->is_number_integer()) out.sampling.seed = static_cast<uint64_t>(it->get<int64_t>());
      else return invalid_argument("'seed' must be an integer");
    }
  }
  const char* max_keys_chat[] = {"max_completion_tokens", "max_tokens"};
  const char* max_keys_resp[] = {"max_output_tokens", "max_tokens"};
  const char* max_keys_other[] = {"max_tokens"};
  std::span<const char*> keys = api == ApiKind::openai_chat ? std::span<const char*>(max_keys_chat)
                                : api == ApiKind::openai_responses ? std::span<const char*>(max_keys_resp)
                                                                   : std::span<const char*>(max_keys_other);
  for (const char* key : keys) {
    DS4_RETURN_IF_ERROR(read_int(req, key, max_tokens));
    if (max_tokens) {
      if (*max_tokens < 1) return invalid_argument(std::string("'") + key + "' must be at least 1");
      out.max_tokens = *max_tokens;
      break;
    }
  }
  return Status::Ok();
}

Status read_stop(const Json& req, const char* key, GenRequest& out) {
  auto it = req.find(key);
  if (it == req.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    out.stop.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& s : *it) {
      if (!s.is_string()) return invalid_argument(std::string("'") + key + "' must be a string or an array of strings");
      out.stop.push_back(s.get<std::string>());
    }
  } else {
    return invalid_argument(std::string("'") + key + "' must be a string or an array of strings");
  }
  std::erase_if(out.stop, [](const std::string& s) { return s.empty(); });
  if (out.stop.size() > 16) return invalid_argument(std::string("'") + key + "' may hold at most 16 sequences");
  return Status::Ok();
}

static bool nonzero_number(const Json& req, const char* key, double neutral) {
  auto it = req.find(key);
  return it != req.end() && it->is_number() && it->get<double>() != neutral;
}

Status reject_unsupported(const Json& req, ApiKind api) {
  auto unsupported_field = [](const std::string& what) {
    return invalid_argument(what + " is not supported by this server; remove it from the request");
  };
  if (auto it = req.find("n"); it != req.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) return unsupported_field("'n' other than 1");
  }
  if (auto it = req.find("best_of"); it != req.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 1) return unsupported_field("'best_of' other than 1");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (nonzero_number(req, key, 0.0)) return unsupported_field(std::string("'") + key + "'");
  if (nonzero_number(req, "repetition_penalty", 1.0)) return unsupported_field("'repetition_penalty'");
  if (auto it = req.find("logit_bias"); it != req.end() && !it->is_null() && !it->empty())
    return unsupported_field("'logit_bias'");
  if (auto it = req.find("response_format"); it != req.end() && !it->is_null()) {
    if (!it->is_object() || it->value("type", std::string()) != "text")
      return unsupported_field("'response_format' (structured output)");
  }
  if (api == ApiKind::openai_chat) {
    if (auto it = req.find("modalities"); it != req.end() && it->is_array()) {
      for (const auto& m : *it)
        if (!m.is_string() || m.get<std::string>() != "text") return unsupported_field("a non-text 'modalities' entry");
    }
    if (has_value(req, "audio")) return unsupported_field("'audio' output");
    if (has_value(req, "prediction")) return unsupported_field("'prediction'");
    if (has_value(req, "functions")) return unsupported_field("legacy 'functions' (use 'tools')");
  }
  if (api == ApiKind::openai_completions) {
    if (auto it = req.find("echo"); it != req.end() && it->is_boolean() && it->get<bool>())
      return unsupported_field("'echo'");
    if (auto it = req.find("suffix"); it != req.end() && it->is_string() && !it->get<std::string>().empty())
      return unsupported_field("'suffix'");
  }
  if (api == ApiKind::openai_responses) {
    if (auto t = req.find("text"); t != req.end() && t->is_object()) {
      if (auto f = t->find("format"); f != t->end() && !f->is_null()) {
        if (!f->is_object() || f->value("type", std::string()) != "text")
          return unsupported_field("'text.format' (structured output)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace ds4::server
