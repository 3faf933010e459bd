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

// Which added-token strings parse_special recognises inside text (TOKENIZER.md §6.3).
enum class SpecialSet {
  // The seven strings ds4 recognises in rendered prompts: <｜begin▁of▁sentence｜>,
  // <｜end▁of▁sentence｜>, <｜User｜>, <｜Assistant｜>, <think>, </think>, ｜DSML｜ (ds4-server
  // byte compatibility; the default).
  ds4,
  // Every added token of the vocabulary (1283 in V4), as the official HF pipeline does.
  all_added,
};

struct EncodeOptions {
  // Recognise special/added-token strings ("<｜User｜>", "<think>", ...) in the text. When false
  // they are ordinary text and are split by the pre-tokenizer like anything else.
  bool parse_special = false;
  // The set recognised when parse_special is true (leftmost-longest match).
  SpecialSet special_set = SpecialSet::ds4;
  // Prepend BOS (id from tokenizer.ggml.bos_token_id).
  bool add_bos = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the tokenizer from the `tokenizer.ggml.*` metadata of a GGUF file.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  // Any bytes are accepted and decode(encode(x)) == x. Invalid UTF-8 is not repaired: each byte
  // that does not start a well-formed sequence is one pre-tokenizer character with no Unicode class
  // and is encoded by its byte symbol. (HF/JS tokenizers only ever see repaired text; callers that
  // need their exact ids repair first, e.g. U+FFFD replacement as JSON decoding already does.)
  // Thread-safe: encode keeps all scratch state per call.
  virtual std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts = {}) const = 0;
  // Concatenated bytes of the tokens (special tokens rendered as their text). May end mid UTF-8
  // sequence; use StreamDecoder for incremental output.
  virtual std::string decode(std::span<const TokenId> ids) const = 0;
  // The raw bytes of one token (after byte-level unmapping); empty for an id out of range.
  virtual std::string token_bytes(TokenId id) const = 0;
  // Appends token_bytes(id) to out without a temporary (the streaming path).
  virtual void append_token_bytes(TokenId id, std::string& out) const { out += token_bytes(id); }
  // The token's string as stored in the vocabulary (byte-level alphabet for BPE tokens, literal
  // text for added tokens); empty for an id out of range.
  virtual std::string_view token_text(TokenId id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;
  virtual TokenId eos_id() const = 0;
  // Looks up a special/added token by its exact text; -1 when absent.
  virtual TokenId special_id(std::string_view text) const = 0;
  // True for added tokens (BOS/EOS/pad, <｜User｜>, <think>, placeholders, ...): ids that BPE never
  // produces, i.e. neither a single-byte symbol nor the result of a merge.
  virtual bool is_special(TokenId id) const = 0;
  // Bytes of memory held by the tokenizer tables (for memory accounting).
  virtual size_t memory_bytes() const = 0;
};

// Incremental detokenizer: push ids as they are generated; push() returns only complete UTF-8
// characters, holding back an incomplete tail (a token may end mid-character: 🦙 = 3 tokens) until
// the next push. Bytes that can never become valid UTF-8 come out as U+FFFD (WHATWG replacement),
// so the concatenated output is always well-formed. flush() at end of stream returns the held tail
// (U+FFFD for an incomplete one) and resets the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(TokenId id);
  std::string flush();
  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace ds4
