// cmd_detokenize.cpp — `ds4 detokenize -m MODEL.gguf`: reads token ids from stdin (one per line;
// blank lines and surrounding spaces ignored) and writes the decoded bytes to stdout exactly
// (special tokens as their text, no UTF-8 repair). A malformed or out-of-range id is an error
// naming the line, with a non-zero exit and nothing written.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "ds4/tokens.h"
#include "gguf/gguf.h"

const char* ds4_cmd_detokenize_help() { return "decode token ids (one per line on stdin) to text"; }

int ds4_cmd_detokenize(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 detokenize — read token ids from stdin, one per line, and write the text."};
  std::string model;
  app.add_option("-m,--model", model, "model GGUF file (only its tokenizer metadata is read)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto gguf_file = gguf::File::open(model);
  if (!gguf_file.ok()) {
    std::fprintf(stderr, "ds4 detokenize: %s\n", gguf_file.status().to_string().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_gguf(**gguf_file);
  if (!tok.ok()) {
    std::fprintf(stderr, "ds4 detokenize: %s: %s\n", model.c_str(), tok.status().to_string().c_str());
    return 1;
  }
  const int64_t n_vocab = (*tok)->vocab_size();
  std::vector<TokenId> ids;
  std::string line;
  for (size_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const size_t e = line.find_last_not_of(" \t\r");
    const std::string word = line.substr(b, e - b + 1);
    int64_t v = 0;
    bool ok = !word.empty() && word.size() <= 12;
    for (char c : word) {
      if (c < '0' || c > '9') { ok = false; break; }
      v = v * 10 + (c - '0');
    }
    if (!ok || v >= n_vocab) {
      std::fprintf(stderr, "ds4 detokenize: line %zu: '%s' is not a token id in [0, %lld)\n", line_no, word.c_str(),
                   static_cast<long long>(n_vocab));
      return 1;
    }
    ids.push_back(TokenId(v));
  }
  const std::string text = (*tok)->decode(ids);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    std::fprintf(stderr, "ds4 detokenize: write error on stdout\n");
    return 1;
  }
  return 0;
}
