// bpe_tokenizer.h — the Tokenizer implementation: byte-level BPE over the DeepSeek pre-tokenizer,
// with added-token matching, built from TokenizerData (hf_import.h).
//
// Tables (all built once in create(), immutable afterwards, so one instance serves any number of
// threads; encode() keeps its scratch and piece cache on the stack of the call):
//   texts_      [n_vocab] token strings as stored (byte-level alphabet / literal added text)
//   bytes_      concatenated decoded bytes of every token, bytes_off_ [n_vocab + 1] offsets
//   byte_id_    [256] id of each single-byte symbol (BPE's starting symbols)
//   merges_     (left id, right id) -> (rank, result id)
//   added_      [n_vocab] 1 for added tokens (not a byte symbol, not a merge result)
// Deliberately not here: pre-tokenizer scanning (pretokenizer.h), GGUF parsing (gguf_metadata.cpp).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ds4/tokens.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/merge_table.h"
#include "tokenizer/special_matcher.h"

namespace ds4::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(const TokenizerData& data);
  // Same, taking over the token strings instead of copying them (the loading path).
  static Result<std::unique_ptr<BpeTokenizer>> create(TokenizerData&& data);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts = {}) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  std::string token_bytes(TokenId id) const override;
  void append_token_bytes(TokenId id, std::string& out) const override;
  std::string_view token_text(TokenId id) const override;
  int32_t vocab_size() const override { return int32_t(texts_.size()); }
  TokenId bos_id() const override { return bos_; }
  TokenId eos_id() const override { return eos_; }
  TokenId special_id(std::string_view text) const override;
  bool is_special(TokenId id) const override;
  size_t memory_bytes() const override;

  // Appends the ids of text with no special matching (pre-tokenize + BPE).
  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
  size_t merge_count() const { return merges_.size(); }

 private:
  BpeTokenizer() = default;
  struct Scratch;
  void encode_piece(const uint8_t* b, const uint8_t* e, std::vector<TokenId>& out, Scratch& s) const;

  std::vector<std::string> texts_;
  std::string bytes_;
  std::vector<uint32_t> bytes_off_;
  std::array<int32_t, 256> byte_id_{};
  MergeTable merges_;
  std::vector<uint8_t> added_;
  std::unordered_map<std::string_view, int32_t> id_of_added_;  // views into texts_
  SpecialMatcher ds4_specials_;
  SpecialMatcher all_added_;
  TokenId bos_ = 0, eos_ = 1;
};

}  // namespace ds4::tokenizer
