// prompt.cpp — see prompt.h.
#include "server/prompt.h"

#include "server/worker.h"

namespace ds4::server {

Result<RenderedPrompt> render_and_tokenize(GenRequest& req, const Tokenizer& tok, const PromptOptions& opts,
                                           SharedReplayStore* replay) {
  RenderedPrompt out;
  EncodeOptions enc;
  enc.parse_special = true;
  if (req.raw_completion) {
    out.text = req.prompt_text;
    enc.add_bos = out.text.rfind(chat::kBos, 0) != 0;
  } else {
    if (opts.flavor == chat::Flavor::ds4 && opts.exact_dsml_replay && replay) replay->attach(req.conversation);
    chat::RenderOptions ro;
    ro.flavor = opts.flavor;
    ro.think = req.think;
    auto text = chat::render_prompt(req.conversation, ro);
    if (!text.ok()) return text.status();
    out.text = std::move(text).value();
  }
  out.tokens = tok.encode(out.text, enc);
  if (out.tokens.empty()) return invalid_argument("the prompt is empty");
  return out;
}

}  // namespace ds4::server
