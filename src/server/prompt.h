// prompt.h — GenRequest -> prompt text -> token ids. Runs on the HTTP thread (rendering and BPE are
// CPU work that must not stall the engine worker); the tokenizer is const and thread-safe.
#pragma once

#include <string>
#include <vector>

#include "ds4/tokens.h"
#include "server/gen_request.h"

namespace ds4::server {

class SharedReplayStore;

struct PromptOptions {
  chat::Flavor flavor = chat::Flavor::ds4;
  bool exact_dsml_replay = true;  // attach remembered DSML blocks to replayed tool calls (ds4 flavor)
};

struct RenderedPrompt {
  std::string text;
  std::vector<TokenId> tokens;
};

// Chat APIs: render the conversation (special strings in the template become single ids).
// /v1/completions: the raw prompt, BOS prepended unless the text already starts with it.
Result<RenderedPrompt> render_and_tokenize(GenRequest& req, const Tokenizer& tok, const PromptOptions& opts,
                                           SharedReplayStore* replay);

}  // namespace ds4::server
