// cmd_tokenize.cpp — `ds4 tokenize -m MODEL.gguf [--file F | -p TEXT] [--special [--special-set S]]`:
// prints the token ids of a text, one per line, and nothing else on stdout (errors go to stderr
// with a non-zero exit). With neither --file nor -p the text is read from stdin. Only the GGUF's
// tokenizer.ggml.* metadata is read; the weights are never touched.
// Deliberately not here: chat rendering (the text is tokenized as given).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "ds4/tokens.h"
#include "gguf/gguf.h"

const char* ds4_cmd_tokenize_help() { return "print the token ids of a text (one per line)"; }

int ds4_cmd_tokenize(int argc, char** argv) {
  using namespace ds4;
  CLI::App app{"ds4 tokenize — print the token ids of a text, one per line.\n"
               "Special-token strings are ordinary text unless --special is given; no BOS is added unless --bos."};
  std::string model, file, prompt, special_set = "ds4";
  bool special = false, bos = false;
  app.add_option("-m,--model", model, "model GGUF file (only its tokenizer metadata is read)")->required();
  auto* f_opt = app.add_option("--file,-f", file, "read the text from this file (bytes as is)");
  auto* p_opt = app.add_option("-p,--prompt", prompt, "the text");
  f_opt->excludes(p_opt);
  app.add_flag("--special", special, "recognise special-token strings (<｜User｜>, <think>, ...) as single ids");
  app.add_option("--special-set", special_set,
                 "with --special: 'ds4' (the 7 strings ds4-server recognises) or 'all' (every added token)")
      ->capture_default_str();
  app.add_flag("--bos", bos, "prepend the BOS id");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  EncodeOptions opts;
  opts.parse_special = special;
  opts.add_bos = bos;
  if (special_set == "ds4") {
    opts.special_set = SpecialSet::ds4;
  } else if (special_set == "all") {
    opts.special_set = SpecialSet::all_added;
  } else {
    std::fprintf(stderr, "ds4 tokenize: --special-set must be 'ds4' or 'all', got '%s'\n", special_set.c_str());
    return 2;
  }

  std::string text;
  if (!p_opt->empty()) {
    text = prompt;
  } else {
    std::ostringstream ss;
    if (!f_opt->empty()) {
      std::ifstream in(file, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "ds4 tokenize: cannot read '%s'\n", file.c_str());
        return 1;
      }
      ss << in.rdbuf();
    } else {
      ss << std::cin.rdbuf();
    }
    text = ss.str();
  }

  auto gguf_file = gguf::File::open(model);
  if (!gguf_file.ok()) {
    std::fprintf(stderr, "ds4 tokenize: %s\n", gguf_file.status().to_string().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_gguf(**gguf_file);
  if (!tok.ok()) {
    std::fprintf(stderr, "ds4 tokenize: %s: %s\n", model.c_str(), tok.status().to_string().c_str());
    return 1;
  }
  std::string out;
  for (TokenId id : (*tok)->encode(text, opts)) {
    out += std::to_string(id);
    out += '\n';
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    std::fprintf(stderr, "ds4 tokenize: write error on stdout\n");
    return 1;
  }
  return 0;
}
