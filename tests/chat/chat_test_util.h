// chat_test_util.h — helpers shared by the chat tests: file access to the spec examples and the
// encoding_dsv4.py-style input (messages + thinking_mode) -> Conversation conversion.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "chat/chat.h"

namespace ds4::chat::testing {

inline std::string examples_dir() { return std::string(DS4_SPEC_DIR) + "/data/chat_examples/"; }
inline std::string local_data_dir() { return std::string(DS4_SOURCE_DIR) + "/tests/chat/data/"; }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// One encoding_dsv4.py input (messages in OpenAI form, thinking_mode, reasoning_effort).
struct OfficialInput {
  Conversation conv;
  RenderOptions options;
};

inline OfficialInput official_input(const nlohmann::ordered_json& in) {
  OfficialInput r;
  r.options.flavor = Flavor::official;
  const std::string mode = in.value("thinking_mode", "thinking");
  r.options.think = mode == "chat" ? ThinkMode::none : ThinkMode::high;
  if (in.contains("reasoning_effort") && in["reasoning_effort"] == "max" && mode != "chat")
    r.options.think = ThinkMode::max;
  if (in.contains("drop_thinking")) r.options.drop_thinking = in["drop_thinking"].get<bool>();
  for (const auto& jm : in["messages"]) {
    Message m;
    m.role = parse_role(jm.value("role", "user")).value();
    if (jm.contains("content") && jm["content"].is_string()) m.content = jm["content"];
    if (jm.contains("reasoning_content") && jm["reasoning_content"].is_string())
      m.reasoning = jm["reasoning_content"];
    if (jm.contains("tool_call_id")) m.tool_call_id = jm["tool_call_id"];
    if (jm.contains("task")) m.task = jm["task"];
    if (jm.contains("wo_eos")) m.wo_eos = jm["wo_eos"];
    if (jm.contains("response_format")) m.response_format = jm["response_format"].dump();
    if (jm.contains("tools"))
      for (const auto& t : jm["tools"]) m.tools.push_back(t.contains("function") ? t["function"].dump() : t.dump());
    if (jm.contains("tool_calls"))
      for (const auto& c : jm["tool_calls"]) {
        ToolCall call;
        call.id = c.value("id", "");
        call.name = c["function"]["name"];
        const auto& a = c["function"]["arguments"];
        call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
        m.tool_calls.push_back(std::move(call));
      }
    r.conv.messages.push_back(std::move(m));
  }
  return r;
}

}  // namespace ds4::chat::testing
