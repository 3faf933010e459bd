// small_vocab.cpp — the tiny-profile vocabulary (layout documented in hf_import.h): specials,
// the 256 byte symbols, merges learned by plain BPE training on a built-in sample, and the V4
// added tokens the chat encoding needs. Deterministic: same options, same table.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "tokenizer/byte_alphabet.h"
#include "tokenizer/hf_import.h"
#include "tokenizer/pretokenizer.h"

namespace ds4::tokenizer {
namespace {

// Training sample: the kind of text the tiny model's tests send (chat prose, Italian, code, JSON,
// tool markup), so common words become single tokens and tests exercise real merges.
constexpr std::string_view kSample = R"SAMPLE(
The quick brown fox jumps over the lazy dog. The user asks a question and the assistant answers
with a short, exact reply. Think step by step, then give the final answer in one sentence.
Hello, world! How are you today? I am fine, thank you. What is two plus two? The answer is four.
Return exactly this text: the model should stream the tokens back to the client as they arrive.
You are a helpful assistant. Answer the question with the shortest exact phrase you can find.
Quel ramo del lago di Como, che volge a mezzogiorno, tra due catene non interrotte di monti,
tutto a seni e a golfi, a seconda dello sporgere e del rientrare di quelli, vien, quasi a un tratto,
a ristringersi, e a prender corso e figura di fiume. Perché sì, la città è bella; però è tardi.
def main(argc, argv):
    for i in range(10):
        if i % 2 == 0:
            print("even", i)
        else:
            return None
int main(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        printf("%s\n", argv[i]);
    }
    return 0;
}
{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome", "unit": "celsius"}}}
<tool_result>{"content": "The weather in Rome is sunny and the temperature is 25 degrees."}</tool_result>
<tool_call><name>search</name><parameter name="query" string="true">the latest news</parameter></tool_call>
The server returns the tokens, the text and the reasoning content; the client then reads the stream.
This is a test of the tokenizer: numbers 123 456 7890, dates 2024-01-15, and times 12:30:45.
)SAMPLE";

constexpr std::string_view kAdded[] = {
    "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>",
    "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
    "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>",
};
constexpr int32_t kFirstByte = 3;
constexpr int32_t kFixed = kFirstByte + 256 + int32_t(std::size(kAdded));

}  // namespace

Result<TokenizerData> make_small_vocab(const SmallVocabOptions& opts) {
  if (opts.vocab_size < kFixed)
    return invalid_argument("small vocab: vocab_size " + std::to_string(opts.vocab_size) + " < " +
                            std::to_string(kFixed) + " (3 specials + 256 bytes + 16 added tokens)");
  TokenizerData d;
  d.tokens = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  std::unordered_map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_byte_level(s, std::string_view(reinterpret_cast<const char*>(&b), 1));
    id_of[s] = int32_t(d.tokens.size());
    d.tokens.push_back(std::move(s));
  }
  // Words = pre-token pieces of the sample with their counts, as symbol-id sequences.
  std::map<std::string_view, int> counts;
  for (std::string_view p : pretokenize_pieces(kSample)) ++counts[p];
  struct Word {
    std::vector<int32_t> syms;
    int count;
  };
  std::vector<Word> words;
  for (const auto& [piece, c] : counts) {
    Word w{{}, c};
    for (unsigned char ch : piece) w.syms.push_back(kFirstByte + ch);
    words.push_back(std::move(w));
  }
  const int32_t n_merge_tokens = opts.vocab_size - kFixed;
  while (int32_t(d.tokens.size()) < kFirstByte + 256 + n_merge_tokens) {
    // Most frequent adjacent pair; ties -> smallest (left, right) ids, for determinism.
    std::map<std::pair<int32_t, int32_t>, int> pairs;
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) pairs[{w.syms[i], w.syms[i + 1]}] += w.count;
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (best == pairs.end() || it->second > best->second) best = it;
    if (best == pairs.end())
      return internal_error("small vocab: the training sample yields only " + std::to_string(d.merges.size()) +
                            " merges; vocab_size " + std::to_string(opts.vocab_size) + " is too large");
    const auto [l, r] = best->first;
    const std::string merged = d.tokens[l] + d.tokens[r];
    d.merges.push_back(d.tokens[l] + " " + d.tokens[r]);
    int32_t id;
    if (auto it = id_of.find(merged); it != id_of.end()) {
      id = it->second;  // already made by another pair: the merge exists, no new token
    } else {
      id = int32_t(d.tokens.size());
      id_of[merged] = id;
      d.tokens.push_back(merged);
    }
    for (Word& w : words) {
      std::vector<int32_t> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == l && w.syms[i + 1] == r) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
    }
  }
  for (std::string_view a : kAdded) d.tokens.emplace_back(a);
  d.token_types.assign(d.tokens.size(), int32_t(TokenType::normal));
  for (int i = 0; i < kFirstByte; ++i) d.token_types[i] = int32_t(TokenType::control);
  for (size_t i = d.tokens.size() - std::size(kAdded); i < d.tokens.size(); ++i)
    d.token_types[i] = int32_t(TokenType::user_defined);
  DS4_RETURN_IF_ERROR(validate_tokenizer_data(d));
  return d;
}

}  // namespace ds4::tokenizer
