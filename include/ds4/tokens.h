// tokens.h — public tokenizer API: DeepSeek V4 byte-level BPE loaded from GGUF metadata.
//
// Owned by src/tokenizer/. The engine exposes the model's Tokenizer; tools and the server use
// only this header (never the BPE internals). Decoding is byte-exact; StreamDecoder never emits
// a partial UTF-8 sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"

namespace ds4 {

namespace gguf { class File; }

using TokenId = int32_t;

struct EncodeOptions {
  // Recognise special/added-token strings ("<｜User｜>", "<think>", ...) in the text. When false
  // they are ordinary text and are split by the pre-tokenizer like anything else.
  bool parse_special = false;
  // Prepend BOS (id from tokenizer.ggml.bos_token_id).
  bool add_bos = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the tokenizer from the `tokenizer.ggml.*` metadata of a GGUF file.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  virtual std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts = {}) const = 0;
  // Concatenated bytes of the tokens (special tokens rendered as their text). May end mid UTF-8
  // sequence; use StreamDecoder for incremental output.
  virtual std::string decode(std::span<const TokenId> ids) const = 0;
  // The raw bytes of one token (after byte-level unmapping).
  virtual std::string token_bytes(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;
  virtual TokenId eos_id() const = 0;
  // Looks up a special/added token by its exact text; -1 when absent.
  virtual TokenId special_id(std::string_view text) const = 0;
  virtual bool is_special(TokenId id) const = 0;
  // Bytes of memory held by the tokenizer tables (for memory accounting).
  virtual size_t memory_bytes() const = 0;
};

// Incremental detokenizer: push ids as they are generated; text() returns only complete UTF-8
// characters, holding back an incomplete tail until the next push (or flush at end of stream,
// which replaces an incomplete tail with U+FFFD).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(TokenId id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace ds4
