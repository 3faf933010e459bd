// test_fuzz_requests.cpp — request-parser fuzzing as a ctest: valid seed bodies for every API are
// mutated (byte flips, insertions, deletions, truncation, splices, structure-aware value swaps) and
// pushed through parse -> map -> render -> tokenize -> formatter. Nothing may crash, throw or hang;
// anything accepted must be internally consistent. Deterministic (fixed seed), ~2 s.
#include <gtest/gtest.h>

#include <random>

#include "scripted_engine.h"
#include "server/format.h"
#include "server/map_request.h"
#include "server/prompt.h"

namespace ds4::server {
namespace {

struct Seed {
  ApiKind api;
  const char* body;
};

const Seed kSeeds[] = {
    {ApiKind::openai_chat, R"({"model":"deepseek-v4-flash","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"call_1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"auto","temperature":0.7,"top_p":0.9,"max_tokens":5,"stop":["x"],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2,"reasoning_effort":"high"})"},
    {ApiKind::openai_completions, R"({"model":"deepseek-chat","prompt":["Once upon"],"max_tokens":3,"logprobs":1,"stop":"\n","seed":3})"},
    {ApiKind::anthropic_messages, R"({"model":"deepseek-v4-flash","max_tokens":8,"system":[{"type":"text","text":"sys"}],"thinking":{"type":"enabled","budget_tokens":100},"tools":[{"name":"w","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"w"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"a"},{"type":"tool_use","id":"toolu_1","name":"w","input":{"c":"R"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"22C"}]},{"type":"text","text":"more"}]}],"stop_sequences":["END"],"stream":false})"},
    {ApiKind::openai_responses, R"({"model":"deepseek-v4-flash","instructions":"You code.","input":[{"role":"user","content":[{"type":"input_text","text":"ls"}]},{"type":"reasoning","summary":[{"type":"summary_text","text":"run"}]},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"c1","output":"a.c"},{"type":"custom_tool_call","call_id":"c2","name":"patch","input":"diff"},{"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"ok"}]}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":"namespace","name":"ns.","tools":[{"name":"x","parameters":{}}]}],"tool_choice":"auto","reasoning":{"effort":"max","summary":"auto"},"max_output_tokens":7,"stream":true})"},
};

const char* kFragments[] = {"null", "true", "0", "-1", "1e309", "\"\"", "\"x\"", "[]", "{}", "[[[[", "}}}", "\"\\u0000\"",
                            "\"\\ud800\"", "99999999999999999999999", "{\"type\":\"text\"}", "\"<｜end▁of▁sentence｜>\"",
                            "\"</｜DSML｜parameter>\"", ",", ":", "\xff", "\"\xc3\""};

std::string mutate(std::string s, std::mt19937& rng) {
  std::uniform_int_distribution<int> op(0, 6);
  const int n_ops = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n_ops && !s.empty(); ++k) {
    const size_t pos = rng() % s.size();
    switch (op(rng)) {
      case 0: s[pos] = static_cast<char>(rng() & 0xFF); break;
      case 1: s.insert(pos, 1, "{}[]\":,\\"[rng() % 8]); break;
      case 2: s.erase(pos, 1 + rng() % 8); break;
      case 3: s.resize(pos); break;
      case 4: s.insert(pos, kFragments[rng() % std::size(kFragments)]); break;
      case 5: {  // replace the value after a ':' with a fragment (structure-aware)
        size_t c = s.find(':', pos);
        if (c == std::string::npos) break;
        size_t end = s.find_first_of(",}]", c + 1);
        if (end == std::string::npos) break;
        s.replace(c + 1, end - c - 1, kFragments[rng() % std::size(kFragments)]);
        break;
      }
      case 6: {  // duplicate a slice
        size_t len = rng() % std::min<size_t>(64, s.size() - pos);
        s.insert(rng() % s.size(), s.substr(pos, len));
        break;
      }
    }
  }
  return s;
}

void exercise(ApiKind api, const std::string& body, const Tokenizer& tok) {
  auto j = parse_request_json(body);
  if (!j.ok()) {
    EXPECT_FALSE(j.status().message().empty());
    return;
  }
  MapOptions mo;
  auto g = map_request(api, *j, mo, body);
  if (!g.ok()) {
    EXPECT_FALSE(g.status().message().empty());
    return;
  }
  if (g->max_tokens) EXPECT_GE(*g->max_tokens, 1);
  EXPECT_GE(g->sampling.temperature, 0.0f);
  if (g->tool_force.required) EXPECT_TRUE(g->tools_enabled);
  auto rp = render_and_tokenize(*g, tok, PromptOptions{}, nullptr);
  if (rp.ok()) EXPECT_FALSE(rp->tokens.empty());
  // Formatters accept any event sequence the worker can produce.
  auto fmt = make_formatter(*g, FormatContext{"id", 0, g->model});
  GenEvent ev;
  ev.kind = GenEventKind::started;
  fmt->on_event(ev);
  ev.kind = GenEventKind::call_args;  // arguments for a call that never began
  ev.index = 3;
  ev.text = "{\"a\"";
  fmt->on_event(ev);
  ev.kind = GenEventKind::done;
  fmt->on_event(ev);
  (void)dump_json(fmt->final_json());
}

TEST(FuzzRequests, MutatedBodiesNeverCrash) {
  testing::ScriptedEngine engine("x");
  std::mt19937 rng(20261129);
  int accepted = 0, total = 0;
  for (const Seed& seed : kSeeds) {
    exercise(seed.api, seed.body, engine.tokenizer());
    for (int i = 0; i < 1500; ++i) {
      std::string body = mutate(seed.body, rng);
      const size_t before = accepted;
      auto j = parse_request_json(body);
      if (j.ok() && map_request(seed.api, *j, MapOptions{}, body).ok()) ++accepted;
      (void)before;
      exercise(seed.api, body, engine.tokenizer());
      // Also through the other APIs' parsers: a body for one API sent to another endpoint.
      exercise(static_cast<ApiKind>((static_cast<int>(seed.api) + 1 + i % 3) % 4), body, engine.tokenizer());
      ++total;
    }
  }
  EXPECT_GT(accepted, 0);       // the mutator is not only producing garbage...
  EXPECT_LT(accepted, total);   // ...nor only valid bodies
}

TEST(FuzzRequests, HostileShapes) {
  testing::ScriptedEngine engine("x");
  const std::string deep_ok = std::string(100, '[') + std::string(100, ']');
  for (const std::string& body :
       {std::string("{\"messages\":") + deep_ok + "}", std::string("{\"messages\":[") + std::string(100000, ' ') + "]}",
        std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"") + std::string(200000, 'a') + "\"}]}",
        std::string("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":null}]}"),
        std::string("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{\"deep\":") +
            deep_ok + "}}}]},{\"role\":\"user\",\"content\":\"x\"}]}"}) {
    for (int api = 0; api < 4; ++api) exercise(static_cast<ApiKind>(api), body, engine.tokenizer());
  }
}

}  // namespace
}  // namespace ds4::server
