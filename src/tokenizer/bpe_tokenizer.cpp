// bpe_tokenizer.cpp — see bpe_tokenizer.h.
#include "tokenizer/bpe_tokenizer.h"

#include <cstring>

#include "tokenizer/byte_alphabet.h"
#include "tokenizer/pretokenizer.h"

namespace ds4::tokenizer {
namespace {

// The seven strings ds4 recognises in rendered prompts (TOKENIZER.md §6.1).
constexpr std::string_view kDs4Specials[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "｜DSML｜",
};
constexpr std::string_view kFullwidthBar = "｜";  // U+FF5C: marks a literal (non byte-level) token

// Per-call cache of piece -> ids, direct mapped (a collision overwrites). Entries point into the
// input text and into the output vector of the same call, so nothing outlives encode().
struct CacheEntry {
  uint64_t hash = 0;
  const uint8_t* piece = nullptr;
  uint32_t len = 0;
  uint32_t out_off = 0;  // ids are out[out_off, out_off + n_ids)
  uint32_t n_ids = 0;
};

inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL ^ n;  // FNV-1a; pieces are short
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace

struct BpeTokenizer::Scratch {
  std::vector<int32_t> syms;
  MergeTable::Scratch merge;
  std::vector<CacheEntry> cache;  // size is a power of two, or empty (no caching)
};

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(const TokenizerData& data) {
  return create(TokenizerData(data));
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(TokenizerData&& data) {
  DS4_RETURN_IF_ERROR(validate_tokenizer_data(data));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  const size_t n = data.tokens.size();
  t->texts_ = std::move(data.tokens);  // data.tokens is not used below
  t->bos_ = TokenId(data.bos_id);
  t->eos_ = TokenId(data.eos_id);

  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) id_of[t->texts_[i]] = int32_t(i);

  // Decoded bytes per token (TOKENIZER.md §7): literal when it contains U+FF5C, else unmapped.
  t->bytes_off_.resize(n + 1);
  for (size_t i = 0; i < n; ++i) {
    t->bytes_off_[i] = uint32_t(t->bytes_.size());
    const std::string& s = t->texts_[i];
    if (s.find(kFullwidthBar) != std::string::npos) t->bytes_ += s;
    else t->bytes_ += byte_level_to_bytes(s);
  }
  t->bytes_off_[n] = uint32_t(t->bytes_.size());

  std::vector<uint8_t> produced(n, 0);  // byte symbols and merge results: what BPE can emit
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    append_byte_level(sym, std::string_view(reinterpret_cast<const char*>(&b), 1));
    auto it = id_of.find(sym);
    if (it == id_of.end())
      return invalid_data("tokenizer: the vocabulary lacks the single-byte symbol for byte " +
                          std::to_string(b) + " (\"" + sym + "\"); byte-level BPE needs all 256");
    t->byte_id_[b] = it->second;
    produced[it->second] = 1;
  }

  t->merges_.reserve(data.merges.size());
  std::string joined;
  for (size_t r = 0; r < data.merges.size(); ++r) {
    const std::string& m = data.merges[r];
    const size_t sp = m.find(' ');  // validated: exactly one separator, both sides non-empty
    const std::string_view l(m.data(), sp), rr(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(l);
    joined += rr;
    const int32_t result = id_of.at(joined);
    t->merges_.add(id_of.at(l), id_of.at(rr), uint32_t(r), result);
    produced[result] = 1;
  }

  t->added_.assign(n, 0);
  std::vector<std::pair<std::string_view, int32_t>> all, ds4;
  for (size_t i = 0; i < n; ++i) {
    if (produced[i]) continue;
    t->added_[i] = 1;
    t->id_of_added_[t->texts_[i]] = int32_t(i);
    all.emplace_back(t->texts_[i], int32_t(i));
  }
  for (std::string_view s : kDs4Specials) {
    auto it = id_of.find(s);
    if (it != id_of.end()) ds4.emplace_back(it->first, it->second);
  }
  t->all_added_.build(all);
  t->ds4_specials_.build(ds4);
  return t;
}

void BpeTokenizer::encode_piece(const uint8_t* b, const uint8_t* e, std::vector<TokenId>& out,
                                Scratch& s) const {
  const size_t len = size_t(e - b);
  if (len == 1) {
    out.push_back(byte_id_[*b]);
    return;
  }
  CacheEntry* slot = nullptr;
  uint64_t h = 0;
  if (!s.cache.empty() && len <= 64) {
    h = hash_bytes(b, len);
    slot = &s.cache[h & (s.cache.size() - 1)];
    if (slot->hash == h && slot->len == len && std::memcmp(slot->piece, b, len) == 0) {
      const size_t off = slot->out_off;
      out.insert(out.end(), out.begin() + ptrdiff_t(off), out.begin() + ptrdiff_t(off + slot->n_ids));
      return;
    }
  }
  s.syms.resize(len);
  for (size_t i = 0; i < len; ++i) s.syms[i] = byte_id_[b[i]];
  const size_t before = out.size();
  merges_.apply(s.syms, out, s.merge);
  if (slot) *slot = {h, b, uint32_t(len), uint32_t(before), uint32_t(out.size() - before)};
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<TokenId>& out) const {
  Scratch s;
  // A cache pays off only when pieces repeat; size it to the text (one slot per ~8 bytes).
  if (text.size() >= 256) {
    size_t cap = 256;
    while (cap < text.size() / 8 && cap < (1u << 14)) cap *= 2;
    s.cache.resize(cap);
  }
  out.reserve(out.size() + text.size() / 3);
  auto emit = [&](const uint8_t* b, const uint8_t* e) { encode_piece(b, e, out, s); };
  pretokenize(text, emit);
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<TokenId> out;
  if (opts.add_bos) out.push_back(bos_);
  if (!opts.parse_special) {
    encode_plain(text, out);
    return out;
  }
  const SpecialMatcher& m = opts.special_set == SpecialSet::all_added ? all_added_ : ds4_specials_;
  size_t pos = 0;
  SpecialMatcher::Match hit;
  while (m.find(text, pos, hit)) {
    if (hit.start > pos) encode_plain(text.substr(pos, hit.start - pos), out);
    out.push_back(hit.id);
    pos = hit.start + hit.length;
  }
  if (pos < text.size()) encode_plain(text.substr(pos), out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids) append_token_bytes(id, out);
  return out;
}

void BpeTokenizer::append_token_bytes(TokenId id, std::string& out) const {
  if (id < 0 || size_t(id) >= texts_.size()) return;
  out.append(bytes_, bytes_off_[id], bytes_off_[id + 1] - bytes_off_[id]);
}

std::string BpeTokenizer::token_bytes(TokenId id) const {
  std::string out;
  append_token_bytes(id, out);
  return out;
}

std::string_view BpeTokenizer::token_text(TokenId id) const {
  if (id < 0 || size_t(id) >= texts_.size()) return {};
  return texts_[id];
}

TokenId BpeTokenizer::special_id(std::string_view text) const {
  auto it = id_of_added_.find(text);
  return it == id_of_added_.end() ? -1 : it->second;
}

bool BpeTokenizer::is_special(TokenId id) const {
  return id >= 0 && size_t(id) < added_.size() && added_[id];
}

size_t BpeTokenizer::memory_bytes() const {
  size_t b = sizeof(*this) + bytes_.capacity() + bytes_off_.capacity() * 4 + added_.capacity() +
             merges_.memory_bytes() + ds4_specials_.memory_bytes() + all_added_.memory_bytes();
  for (const std::string& s : texts_) b += sizeof(std::string) + (s.capacity() > 15 ? s.capacity() : 0);
  b += id_of_added_.size() * (sizeof(std::string_view) + sizeof(int32_t) + 2 * sizeof(void*));
  return b;
}

}  // namespace ds4::tokenizer
