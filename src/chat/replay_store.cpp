// replay_store.cpp — tool-call ids (OpenSSL RAND_bytes) and the id -> exact DSML map used to
// re-render replayed tool calls byte-identically (CHAT.md §5.6–5.7).
// Ownership: one ToolCallReplayStore per server, owned by whoever serialises requests; blocks
// are shared between the ids of one turn (shared_ptr) and counted once against max_bytes.
// Eviction is LRU by id; a block is freed when its last id goes.
// Not here: persistence into KV files (entries() gives the caller what to write).
#include <openssl/rand.h>

#include <list>
#include <unordered_map>

#include "chat/chat.h"

namespace ds4::chat {

Result<std::string> new_tool_call_id(IdStyle style) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    return internal_error("chat: RAND_bytes failed to produce a tool-call id");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = style == IdStyle::anthropic ? "toolu_" : "call_";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

struct ToolCallReplayStore::Impl {
  struct Entry {
    std::string id;
    std::shared_ptr<const std::string> block;
  };
  ReplayStoreOptions options;
  std::list<Entry> lru;  // front = least recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id;
  size_t bytes = 0;  // distinct block bytes

  void erase(std::list<Entry>::iterator it) {
    // use_count 1 means this entry held the last reference: the block's bytes leave the store.
    if (it->block.use_count() == 1) bytes -= it->block->size();
    by_id.erase(it->id);
    lru.erase(it);
  }

  void evict() {
    while (!lru.empty() && (lru.size() > options.max_ids || bytes > options.max_bytes))
      erase(lru.begin());
  }

  void touch(std::list<Entry>::iterator it) { lru.splice(lru.end(), lru, it); }
};

ToolCallReplayStore::ToolCallReplayStore(ReplayStoreOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
}
ToolCallReplayStore::~ToolCallReplayStore() = default;
ToolCallReplayStore::ToolCallReplayStore(ToolCallReplayStore&&) noexcept = default;
ToolCallReplayStore& ToolCallReplayStore::operator=(ToolCallReplayStore&&) noexcept = default;

void ToolCallReplayStore::remember(std::span<const std::string> ids, std::string_view raw_dsml) {
  if (raw_dsml.empty()) return;
  auto block = std::make_shared<const std::string>(raw_dsml);
  bool counted = false;
  for (const std::string& id : ids) {
    if (id.empty()) continue;
    auto found = impl_->by_id.find(id);
    if (found != impl_->by_id.end()) impl_->erase(found->second);
    if (!counted) {
      impl_->bytes += block->size();
      counted = true;
    }
    impl_->lru.push_back({id, block});
    impl_->by_id[id] = std::prev(impl_->lru.end());
  }
  impl_->evict();
}

const std::string* ToolCallReplayStore::find(std::string_view id) {
  auto it = impl_->by_id.find(std::string(id));
  if (it == impl_->by_id.end()) return nullptr;
  impl_->touch(it->second);
  return it->second->block.get();
}

bool ToolCallReplayStore::contains(std::string_view id) const {
  return impl_->by_id.count(std::string(id)) != 0;
}

Status ToolCallReplayStore::assign_ids_and_remember(std::span<ParsedCall> calls, IdStyle style,
                                                    std::string_view raw_dsml) {
  std::vector<std::string> ids;
  for (ParsedCall& c : calls) {
    while (c.id.empty()) {
      DS4_ASSIGN_OR_RETURN(std::string id, new_tool_call_id(style));
      bool clash = contains(id);
      for (const ParsedCall& other : calls) clash = clash || other.id == id;
      if (!clash) c.id = std::move(id);
    }
    ids.push_back(c.id);
  }
  remember(ids, raw_dsml);
  return Status::Ok();
}

size_t ToolCallReplayStore::attach(Conversation& conv) {
  size_t attached = 0;
  for (Message& m : conv.messages) {
    if (m.role != Role::assistant || m.tool_calls.empty()) continue;
    const std::string* block = nullptr;
    bool same = true;
    for (const ToolCall& c : m.tool_calls) {
      const std::string* b = c.id.empty() ? nullptr : find(c.id);
      if (!b || (block && b != block)) {
        same = false;
        break;
      }
      block = b;
    }
    if (same && block) {
      m.raw_dsml = *block;
      ++attached;
    }
  }
  return attached;
}

size_t ToolCallReplayStore::size() const { return impl_->lru.size(); }
size_t ToolCallReplayStore::bytes() const { return impl_->bytes; }
void ToolCallReplayStore::clear() {
  impl_->lru.clear();
  impl_->by_id.clear();
  impl_->bytes = 0;
}

std::vector<std::pair<std::string, std::string>> ToolCallReplayStore::entries() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->lru.size());
  for (const auto& e : impl_->lru) out.emplace_back(e.id, *e.block);
  return out;
}

}  // namespace ds4::chat
