// chat.h — DeepSeek V4 chat rendering (messages -> prompt text), the DSML tool-call output
// parser, and the exact-DSML replay store. Spec: /work/shared/spec/CHAT.md.
//
// Two renderings (CHAT.md §2 and §4):
//   * Flavor::official (R-OFF) — DeepSeek's own encoding_dsv4.py, the format the model was
//     trained on. This is the default.
//   * Flavor::ds4 (R-DS4) — what antirez's ds4-server renders. Use it where byte/KV-cache
//     compatibility with ds4-server matters (its clients' prefix caches, replayed tool calls,
//     disk KV files written by ds4). The server's --chat-template style flag picks one.
// Both are pure functions of their inputs: no tokenizer, no I/O, no global state. The output is
// one UTF-8 string; special strings in it (BOS, <｜User｜>, ...) become single ids only when the
// tokenizer is asked to recognise them (TOKENIZER.md).
//
// Deliberately not here: HTTP request parsing beyond the request->Conversation mapping helpers
// (api_map.h), sampling, SSE framing, tokenization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ds4/status.h"

namespace ds4::chat {

// ---------------------------------------------------------------------------------------------
// Constants (CHAT.md §1)

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

// Think Max needs a context of at least 384K tokens under ds4 (CHAT.md §1.2, the "384K rule").
inline constexpr int64_t kThinkMaxMinContext = 393216;

// The Think Max reasoning-effort prefix text (476 bytes, ends with "\n\n").
std::string_view think_max_prefix();

// ---------------------------------------------------------------------------------------------
// Inputs

enum class Flavor { official, ds4 };

// none: chat mode, the assistant turn opens "</think>". high: thinking ("<think>").
// max: thinking plus the Think Max prefix right after BOS.
enum class ThinkMode { none, high, max };

// ds4's 384K rule: MAX with ctx < kThinkMaxMinContext silently becomes HIGH. Official rendering
// has no such rule; callers apply this only for ds4 behaviour (the server does it for both
// flavors, since the downgrade protects the context budget, not the format).
ThinkMode think_mode_for_context(ThinkMode requested, int64_t ctx_tokens);

enum class Role {
  system,
  developer,
  user,
  assistant,
  tool,             // OpenAI "tool" and legacy "function" results
  latest_reminder,  // official only (ds4 treats it like system text)
};

// Parses "system", "developer", "user", "assistant", "tool", "function" (-> tool),
// "latest_reminder"; empty -> user (ds4: a missing role is user). Anything else: invalid_argument.
Result<Role> parse_role(std::string_view name);
std::string_view role_name(Role role);

struct ToolCall {
  std::string id;         // client- or server-assigned ("call_…", "toolu_…"); may be empty
  std::string name;
  std::string arguments;  // JSON text as the client sent it (usually an object); may be non-JSON
};

struct Message {
  Role role = Role::user;
  std::string content;    // already flattened text (arrays of parts concatenated by the mapper)
  std::string reasoning;  // assistant reasoning_content / thinking blocks; "" when absent
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only (used for result ordering and replay checks)

  // Official flavor only: tool schemas attached to this system/developer message (raw JSON text
  // of each tool's function object, {name, description, parameters}); response_format JSON
  // text; DeepSeek-internal quick-instruction task ("action", "query", ... ; "" = none);
  // wo_eos: the assistant turn is rendered without EOS.
  std::vector<std::string> tools;
  std::string response_format;
  std::string task;
  bool wo_eos = false;

  // ds4 flavor only: the exact DSML block the model generated for these calls (starting at the
  // "\n\n" if the model produced it, through "</｜DSML｜tool_calls>"). When non-empty it is
  // emitted verbatim instead of the canonical rendering of tool_calls (CHAT.md §5.7).
  // Fill it with ToolCallReplayStore::attach.
  std::string raw_dsml;
};

struct Conversation {
  std::vector<Message> messages;
  // Request-level tool schemas, one raw JSON text per tool, in request order. ds4 flavor: each
  // string is emitted byte-for-byte as one schema line (so keep the client's raw bytes: the
  // OpenAI `function` value, the Anthropic tool object, ...). Official flavor: each is parsed
  // and re-serialised Python-json.dumps style, and (vLLM-wrapper convention, CHAT.md §2.5) the
  // list is attached to the first system message, one being inserted at index 0 if needed.
  std::vector<std::string> tools;
};

struct RenderOptions {
  Flavor flavor = Flavor::official;
  ThinkMode think = ThinkMode::high;  // apply think_mode_for_context first where wanted
  // Official only: encoding_dsv4.py's drop_thinking (drop reasoning of turns before the last
  // user message unless some message carries tools) and add_default_bos_token.
  bool drop_thinking = true;
  bool add_bos = true;
};

// Renders the whole prompt, ending with the assistant prefix ("<｜Assistant｜><think>" or
// "…</think>") when the conversation ends with a user/tool turn; a conversation ending with an
// assistant message is closed with EOS (no new assistant turn). Errors: invalid_argument for
// inputs the format cannot express (e.g. an empty developer message in official flavor,
// unparseable tool schema JSON in official flavor).
Result<std::string> render_prompt(const Conversation& conv, const RenderOptions& options);

// /v1/completions and CLI `-p` shape (ds4 §4 "Other ds4 renderings"):
// BOS + (MAX prefix if max) + system + USER + prompt + ASSISTANT + ("<think>" | "</think>").
std::string render_completion_prompt(std::string_view system, std::string_view prompt,
                                     ThinkMode think);

// ds4 live tool-result continuation tail (CHAT.md §5.7): EOS + the trailing messages rendered as
// in R-DS4 step 6 (assistant messages always with <think>reasoning</think> when thinking) + the
// assistant prefix. The EOS is included because the sampled EOS was never evaluated.
Result<std::string> render_ds4_tail(std::span<const Message> trailing, ThinkMode think);

// Canonical DSML for a list of calls, exactly as the given flavor renders them inside an
// assistant turn (leading "\n\n" included; "" when calls is empty).
std::string render_tool_calls(std::span<const ToolCall> calls, Flavor flavor);

// ---------------------------------------------------------------------------------------------
// Output parsing (CHAT.md §3): generated text -> reasoning, content and tool calls.

struct ParserOptions {
  Flavor flavor = Flavor::ds4;  // ds4: lenient (slips, whitespace, entity decoding); official:
                                // the same structure but string values are taken verbatim
  bool thinking = true;         // the prompt ended with "<think>": text up to </think> is reasoning
  bool tools_enabled = true;    // false: DSML is not recognised, all text after </think> is content
};

struct ParsedCall {
  std::string id;         // empty from the parser; set by ToolCallReplayStore::assign_ids_and_remember
  std::string name;
  std::string arguments;  // a JSON object text: {"k": v, ...} in generation order
};

enum class ParseEventKind {
  reasoning,     // text: a reasoning delta
  content,       // text: a content delta (trailing whitespace before a tool block is withheld)
  call_begin,    // index, name: an invoke header was completed
  call_args,     // index, text: next piece of that call's arguments JSON (concatenation of all
                 // call_args of a call == ParsedCall::arguments)
  call_end,      // index, call: the invoke is complete; call holds the final name + arguments
};

struct ParseEvent {
  ParseEventKind kind = ParseEventKind::content;
  size_t index = 0;    // call index (call_* events)
  std::string text;    // reasoning/content/call_args delta, or the name for call_begin
  ParsedCall call;     // call_end only
};

enum class ParseState {
  reasoning,    // inside <think>…
  content,      // ordinary answer text
  tool_block,   // inside <｜DSML｜tool_calls>…
  done,         // the tool block closed or EOS was seen; further text is ignored
  error,        // malformed DSML; see error()
};

// The complete result after finish().
struct ParsedMessage {
  std::string reasoning;
  std::string content;           // content before the tool block, trailing whitespace removed
  std::vector<ParsedCall> calls;
  std::string raw_dsml;          // the exact generated block (from its "\n\n" if present)
  std::string raw_text;          // everything fed, verbatim
  // What ds4-server returns as content when the DSML is malformed (CHAT.md §3.3): the text after
  // the reasoning (after the first </think> when thinking), verbatim, EOS excluded.
  std::string fallback_content;
  bool saw_eos = false;          // EOS text was seen in the stream
  Status status;                 // ok, or invalid_data describing malformed/truncated DSML
};

// Incremental parser: feed() generated text in arbitrary pieces (split points may fall inside
// markers or inside UTF-8 characters); events are appended to `out` as soon as they are
// certain. Never throws and never crashes on any input; malformed DSML moves it to
// ParseState::error (no more call events; later feeds are recorded in raw_text only).
class DsmlParser {
 public:
  explicit DsmlParser(ParserOptions options = {});
  ~DsmlParser();
  DsmlParser(DsmlParser&&) noexcept;
  DsmlParser& operator=(DsmlParser&&) noexcept;
  DsmlParser(const DsmlParser&) = delete;
  DsmlParser& operator=(const DsmlParser&) = delete;

  void feed(std::string_view piece, std::vector<ParseEvent>& out);
  // End of generation: flushes withheld text; an unterminated think/tool block is reported
  // (truncated tool block -> invalid_data "unterminated tool call"; unterminated reasoning is
  // not an error: the reasoning is simply all the text).
  ParsedMessage finish(std::vector<ParseEvent>& out);

  ParseState state() const;
  const Status& error() const;  // ok unless state() == error

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience: feed everything, finish.
ParsedMessage parse_output(std::string_view text, const ParserOptions& options);

// ---------------------------------------------------------------------------------------------
// Tool-call ids and exact DSML replay (CHAT.md §5.6–5.7)

enum class IdStyle { openai, anthropic };  // "call_" + 32 hex / "toolu_" + 32 hex

// 16 bytes from OpenSSL RAND_bytes, lower-case hex. internal error if RAND_bytes fails.
Result<std::string> new_tool_call_id(IdStyle style);

struct ReplayStoreOptions {
  size_t max_ids = 100000;
  size_t max_bytes = size_t{512} << 20;  // DSML text bytes (each distinct block counted once)
};

// Maps tool-call ids to the exact DSML block the model generated, so a later request that
// replays those calls as JSON re-renders byte-identically (R-DS4). LRU by id. A plain object
// owned by the caller; not thread-safe (the owner serialises access).
class ToolCallReplayStore {
 public:
  explicit ToolCallReplayStore(ReplayStoreOptions options = {});
  ~ToolCallReplayStore();
  ToolCallReplayStore(ToolCallReplayStore&&) noexcept;
  ToolCallReplayStore& operator=(ToolCallReplayStore&&) noexcept;

  // Records id -> raw_dsml for each id (all sharing one block). Empty ids are skipped.
  void remember(std::span<const std::string> ids, std::string_view raw_dsml);
  // The block for one id, or nullptr. Marks it recently used.
  const std::string* find(std::string_view id);
  bool contains(std::string_view id) const;
  // Gives every call in `calls` that has no id a fresh unique one (not in this store, not in the
  // list), then remembers all ids -> raw_dsml.
  Status assign_ids_and_remember(std::span<ParsedCall> calls, IdStyle style,
                                 std::string_view raw_dsml);
  // For each assistant message whose calls' ids ALL map to the SAME stored block, sets
  // raw_dsml to that block (otherwise leaves it untouched). Returns how many were attached.
  size_t attach(Conversation& conv);

  size_t size() const;        // ids held
  size_t bytes() const;       // distinct block bytes held
  void clear();
  // All (id, block) pairs, most recent last (for persisting into KV cache files).
  std::vector<std::pair<std::string, std::string>> entries() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::chat
