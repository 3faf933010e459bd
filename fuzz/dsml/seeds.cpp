// seeds.cpp — fuzz seeds: generated outputs in every DSML shape the parser knows (official and
// slip prefixes, plain tags, nested parameters, entities, unicode, truncations) and request
// bodies for the three chat APIs.
#include <string>
#include <vector>

#include "dsml_fuzz_entry.h"

namespace ds4::chat::fuzz {

std::vector<std::string> seeds() {
  const std::string block =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Zürich &amp; 北京 🌍</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"days\": [1, 2], \"x\": null}</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"noargs\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  const std::vector<std::string> outputs = {
      "Reasoning here.</think>Answer." + block + "<｜end▁of▁sentence｜>",
      "Plain answer with <b>tags</b> and </thi partial<｜end▁of▁sentence｜>",
      "r</think>c\n<DSML｜tool_calls>\n<DSML｜invoke name=\"e\">\n<DSML｜parameter name=\"n\">\n"
      "<DSML｜parameter name=\"a\" string=\"false\">1</DSML｜parameter>\n</DSML｜parameter>\n"
      "</DSML｜invoke>\n</DSML｜tool_calls>",
      "</think><tool_calls><invoke name=\"f\"><parameter name=\"p\">v &lt;/parameter></parameter></invoke></tool_calls>",
      "think <｜DSML｜tool_calls> inside</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"p\" string=\"true\">trunc",
  };
  std::vector<std::string> out;
  for (const std::string& o : outputs)
    for (uint8_t mode : {0x18, 0x10, 0x1C, 0x08})  // parser modes: thinking/tools/flavor mixes
      out.push_back(std::string(1, char(mode)) + std::string(1, char(7)) + o);
  const std::vector<std::string> chat_bodies = {
      R"({"model":"deepseek-chat","messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"q"}]},)"
      R"({"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"a\":[1,{\"b\":\"</｜DSML｜parameter>\"}]}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"x </tool_result>"}],"tools":[{"type":"function","function":{"name":"f"}}],"reasoning_effort":"max"})",
      R"({"prompt":["p"],"think":true})",
  };
  for (const std::string& b : chat_bodies) out.push_back(std::string("\x02\x00", 2) + b);
  const std::vector<std::string> other_bodies = {
      R"({"system":[{"type":"text","text":"S"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[)"
      R"({"type":"thinking","thinking":"t"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"k":1}}]},)"
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"r"},{"type":"text","text":"more"}]}],)"
      R"("tools":[{"name":"f","input_schema":{"type":"object"}}]})",
      R"({"instructions":"I","input":[{"type":"message","role":"user","content":"u"},{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},)"
      R"({"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],)"
      R"("tools":[{"type":"function","name":"f","parameters":{}}]})",
  };
  for (const std::string& b : other_bodies) {
    out.push_back(std::string("\x03\x00", 2) + b);
    out.push_back(std::string("\x07\x00", 2) + b);
  }
  return out;
}

}  // namespace ds4::chat::fuzz
