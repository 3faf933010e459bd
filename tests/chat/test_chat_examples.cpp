// test_chat_examples.cpp — every prompt of /work/shared/spec/data/chat_examples rendered
// byte-exact: off_* through R-OFF from the encoding_dsv4.py inputs, ds4_* through the request
// mappers and R-DS4 from the HTTP request bodies.
#include <gtest/gtest.h>

#include "chat/api_map.h"
#include "chat/chat.h"
#include "chat_test_util.h"

namespace ds4::chat {
namespace {

using nlohmann::ordered_json;
using testing::examples_dir;
using testing::read_file;

std::vector<std::string> example_names(std::string_view prefix) {
  auto manifest = ordered_json::parse(read_file(examples_dir() + "manifest.json"));
  std::vector<std::string> names;
  for (const auto& e : manifest)
    if (e["name"].get<std::string>().rfind(prefix, 0) == 0) names.push_back(e["name"]);
  return names;
}

std::string expected_prompt(const std::string& name) {
  return read_file(examples_dir() + name + ".prompt.txt");
}

// Shows where two long prompts first differ.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return "first difference at byte " + std::to_string(i) + ": got '" + a.substr(i, 80) +
         "' want '" + b.substr(i, 80) + "'";
}

Result<std::string> render_official_example(const std::string& name) {
  std::string path = examples_dir() + name + ".input.json";
  auto in = ordered_json::parse(read_file(path));
  if (!in.contains("messages")) in = ordered_json::parse(read_file(testing::local_data_dir() + name + ".input.json"));
  auto input = testing::official_input(in);
  return render_prompt(input.conv, input.options);
}

Result<std::string> render_ds4_example(const std::string& name) {
  auto in = ordered_json::parse(read_file(examples_dir() + name + ".input.json"));
  const std::string endpoint = in["endpoint"];
  // Captured requests were sent compact unless the raw body file is given (ds4_02, pretty).
  std::string body = in.contains("request_body_file")
                         ? read_file(examples_dir() + in["request_body_file"].get<std::string>())
                         : in["request"].dump();
  const int64_t ctx = 1 << 20;  // every example assumes a context >= 393216
  if (endpoint == "/v1/completions") {
    DS4_ASSIGN_OR_RETURN(MappedRequest r, map_completions(body));
    return render_completion_prompt(kDefaultSystem, r.prompt, think_mode_for_context(r.think, ctx));
  }
  Result<MappedRequest> mapped = invalid_argument("unknown endpoint " + endpoint);
  if (endpoint == "/v1/chat/completions") mapped = map_chat_completions(body);
  if (endpoint == "/v1/messages") mapped = map_anthropic_messages(body);
  if (endpoint == "/v1/responses") mapped = map_responses(body);
  if (!mapped.ok()) return mapped.status();
  RenderOptions o;
  o.flavor = Flavor::ds4;
  o.think = think_mode_for_context(mapped->think, ctx);
  return render_prompt(mapped->conv, o);
}

TEST(ChatExamples, ManifestListsBothRenderers) {
  EXPECT_EQ(example_names("off_").size(), 9u);
  EXPECT_EQ(example_names("ds4_").size(), 9u);
}

TEST(ChatExamples, OfficialByteExact) {
  for (const std::string& name : example_names("off_")) {
    SCOPED_TRACE(name);
    auto got = render_official_example(name);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const std::string want = expected_prompt(name);
    EXPECT_EQ(*got, want) << first_difference(*got, want);
  }
}

TEST(ChatExamples, Ds4ByteExact) {
  for (const std::string& name : example_names("ds4_")) {
    SCOPED_TRACE(name);
    auto got = render_ds4_example(name);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const std::string want = expected_prompt(name);
    EXPECT_EQ(*got, want) << first_difference(*got, want);
  }
}

TEST(ChatExamples, PromptLengthsMatchManifest) {
  auto manifest = ordered_json::parse(read_file(examples_dir() + "manifest.json"));
  for (const auto& e : manifest)
    EXPECT_EQ(expected_prompt(e["name"]).size(), e["prompt_bytes"].get<size_t>()) << e["name"];
}

}  // namespace
}  // namespace ds4::chat
