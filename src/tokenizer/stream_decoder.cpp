// stream_decoder.cpp — StreamDecoder (include/ds4/tokens.h): UTF-8-safe incremental detokenizing.
#include "ds4/tokens.h"
#include "tokenizer/utf8.h"

namespace ds4 {

std::string StreamDecoder::push(TokenId id) {
  tok_.append_token_bytes(id, pending_);
  const size_t safe = tokenizer::utf8_stream_safe_len(pending_);
  if (safe == 0) return {};
  std::string out = tokenizer::utf8_sanitize(std::string_view(pending_).substr(0, safe));
  pending_.erase(0, safe);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = tokenizer::utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace ds4
