// hf_import.cpp — HF tokenizer.json import, the V4 added-token table, validation, table hashes.
// GGUF metadata I/O is in gguf_metadata.cpp; the tiny vocabulary in small_vocab.cpp.
#include "tokenizer/hf_import.h"

#include <openssl/evp.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/bpe_tokenizer.h"

namespace ds4::tokenizer {
namespace {

#include "tokenizer/v4_added_tokens.inc"

// Real vocabularies have ~130k ids; anything far beyond is a corrupt id, not a big vocabulary.
constexpr int64_t kMaxVocab = int64_t(1) << 24;

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("tokenizer: cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("tokenizer: read error on '" + path + "'");
  return ss.str();
}

}  // namespace

Result<TokenizerData> parse_hf_tokenizer_json(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_data("tokenizer.json: not a JSON object");
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return invalid_data("tokenizer.json: missing 'model'");
  if (model->value("type", std::string()) != "BPE")
    return unsupported("tokenizer.json: model.type is not \"BPE\" (only byte-level BPE is supported)");
  const auto vocab = model->find("vocab");
  const auto merges = model->find("merges");
  if (vocab == model->end() || !vocab->is_object()) return invalid_data("tokenizer.json: missing model.vocab");
  if (merges == model->end() || !merges->is_array()) return invalid_data("tokenizer.json: missing model.merges");

  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(vocab->size() + 1024);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) return invalid_data("tokenizer.json: vocab id of '" + it.key() + "' is not an integer");
    entries.emplace_back(it.value().get<int64_t>(), it.key());
  }
  std::unordered_map<int64_t, bool> added_special;  // id -> HF "special" flag
  if (auto at = j.find("added_tokens"); at != j.end() && at->is_array()) {
    for (const auto& a : *at) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["id"].is_number_integer() ||
          !a["content"].is_string())
        return invalid_data("tokenizer.json: malformed added_tokens entry");
      entries.emplace_back(a["id"].get<int64_t>(), a["content"].get<std::string>());
      added_special[a["id"].get<int64_t>()] = a.value("special", false);
    }
  }
  int64_t max_id = -1;
  for (const auto& [id, s] : entries) {
    if (id < 0 || id >= kMaxVocab) return invalid_data("tokenizer.json: token id " + std::to_string(id) + " out of range");
    max_id = std::max(max_id, id);
  }
  TokenizerData d;
  d.tokens.assign(size_t(max_id + 1), std::string());
  std::vector<uint8_t> seen(size_t(max_id + 1), 0);
  for (auto& [id, s] : entries) {
    // An added token may restate a vocab entry with the same id (V3 does for ids 0..2).
    if (seen[id] && d.tokens[id] != s)
      return invalid_data("tokenizer.json: id " + std::to_string(id) + " defined twice ('" + d.tokens[id] + "', '" + s + "')");
    d.tokens[id] = std::move(s);
    seen[id] = 1;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) return invalid_data("tokenizer.json: no token has id " + std::to_string(i));

  d.merges.reserve(merges->size());
  for (const auto& m : *merges) {
    if (m.is_string()) {
      d.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      d.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());  // newer HF format
    } else {
      return invalid_data("tokenizer.json: merge " + std::to_string(d.merges.size()) + " is neither \"a b\" nor [a, b]");
    }
  }
  d.token_types.assign(d.tokens.size(), int32_t(TokenType::normal));
  for (const auto& [id, special] : added_special)
    d.token_types[id] = int32_t(special ? TokenType::control : TokenType::user_defined);
  return d;
}

Status apply_v4_added_tokens(TokenizerData& data, std::string_view tsv_text) {
  if (tsv_text.empty()) tsv_text = kV4AddedTokensTsv;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < tsv_text.size()) {
    size_t eol = tsv_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = tsv_text.size();
    std::string_view line = tsv_text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = "v4 added tokens line " + std::to_string(line_no);
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return invalid_data(where + ": expected 'id<TAB>json-string'");
    int64_t id = 0;
    for (char c : line.substr(0, tab)) {
      if (c < '0' || c > '9' || id > kMaxVocab) return invalid_data(where + ": bad id");
      id = id * 10 + (c - '0');
    }
    if (tab == 0 || id >= kMaxVocab) return invalid_data(where + ": bad id");
    nlohmann::json s = nlohmann::json::parse(line.substr(tab + 1), nullptr, false);
    if (s.is_discarded() || !s.is_string()) return invalid_data(where + ": token is not a JSON string");
    if (size_t(id) >= data.tokens.size()) {
      data.tokens.resize(size_t(id) + 1);
      if (!data.token_types.empty()) data.token_types.resize(size_t(id) + 1, int32_t(TokenType::normal));
    }
    std::string text = s.get<std::string>();
    if (!data.token_types.empty() && data.tokens[id] != text)
      data.token_types[id] = int32_t(id <= 2 ? TokenType::control : TokenType::user_defined);
    data.tokens[id] = std::move(text);
  }
  for (size_t i = 0; i < data.tokens.size(); ++i)
    if (data.tokens[i].empty()) return invalid_data("tokenizer: id " + std::to_string(i) + " left undefined after applying the V4 table");
  return Status::Ok();
}

Result<TokenizerData> import_hf_tokenizer(const HfImportOptions& opts) {
  DS4_ASSIGN_OR_RETURN(std::string json, read_file(opts.tokenizer_json_path));
  auto parsed = parse_hf_tokenizer_json(json);
  if (!parsed.ok()) return parsed.status().with_context(opts.tokenizer_json_path);
  TokenizerData d = std::move(parsed).value();
  if (opts.apply_v4_added_tokens) {
    std::string tsv;
    if (!opts.v4_added_tokens_tsv_path.empty()) {
      DS4_ASSIGN_OR_RETURN(tsv, read_file(opts.v4_added_tokens_tsv_path));
      if (tsv.empty()) return invalid_data("tokenizer: '" + opts.v4_added_tokens_tsv_path + "' is empty");
    }
    DS4_RETURN_IF_ERROR(apply_v4_added_tokens(d, tsv));
  }
  DS4_RETURN_IF_ERROR(validate_tokenizer_data(d));
  return d;
}

Status validate_tokenizer_data(const TokenizerData& d) {
  if (d.model != "gpt2")
    return unsupported("tokenizer: model '" + d.model + "' is not supported (only \"gpt2\" byte-level BPE)");
  if (d.tokens.empty()) return invalid_data("tokenizer: empty vocabulary");
  if (int64_t(d.tokens.size()) > kMaxVocab) return invalid_data("tokenizer: vocabulary too large");
  std::unordered_set<std::string_view> seen;
  seen.reserve(d.tokens.size() * 2);
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    if (d.tokens[i].empty()) return invalid_data("tokenizer: token " + std::to_string(i) + " is empty");
    if (!seen.insert(d.tokens[i]).second)
      return invalid_data("tokenizer: token " + std::to_string(i) + " ('" + d.tokens[i] + "') occurs twice");
  }
  std::string joined;
  for (size_t r = 0; r < d.merges.size(); ++r) {
    const std::string& m = d.merges[r];
    const size_t sp = m.find(' ');
    const std::string where = "tokenizer: merge " + std::to_string(r) + " ('" + m + "')";
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() || m.find(' ', sp + 1) != std::string::npos)
      return invalid_data(where + ": expected \"left right\" with one space");
    const std::string_view l(m.data(), sp), rr(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(l);
    joined += rr;
    if (!seen.count(l) || !seen.count(rr)) return invalid_data(where + ": a side is not in the vocabulary");
    if (!seen.count(joined)) return invalid_data(where + ": the merged token is not in the vocabulary");
  }
  const auto n = d.tokens.size();
  if (d.bos_id >= n || d.eos_id >= n || d.pad_id >= n)
    return invalid_data("tokenizer: bos/eos/padding id out of range for a vocabulary of " + std::to_string(n));
  if (!d.token_types.empty() && d.token_types.size() != n)
    return invalid_data("tokenizer: token_type has " + std::to_string(d.token_types.size()) +
                        " entries for " + std::to_string(n) + " tokens");
  return Status::Ok();
}

std::string canonical_table_sha256(std::span<const std::string> table) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  auto put_u64 = [&](uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i));
    EVP_DigestUpdate(ctx, b, 8);
  };
  for (size_t i = 0; i < table.size(); ++i) {
    put_u64(i);
    put_u64(table[i].size());
    EVP_DigestUpdate(ctx, table[i].data(), table[i].size());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 15]);
  }
  return hex;
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerData& data) {
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, BpeTokenizer::create(data));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(TokenizerData&& data) {
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, BpeTokenizer::create(std::move(data)));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace ds4::tokenizer
