// pretokenizer.cpp — the non-template convenience entry point of pretokenizer.h.
#include "tokenizer/pretokenizer.h"

namespace ds4::tokenizer {

std::vector<std::string_view> pretokenize_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  pretokenize(text, [&](const uint8_t* b, const uint8_t* e) {
    pieces.emplace_back(reinterpret_cast<const char*>(b), size_t(e - b));
  });
  return pieces;
}

}  // namespace ds4::tokenizer
