// disk_cache.cpp — see disk_cache.h.
#include "server/disk_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include "chat/chat.h"

namespace ds4::server {

using Clock = std::chrono::steady_clock;

namespace {
// Names the snapshot formats this build restores (runtime/snapshot.cpp versions 1 and 2). Bump it
// when a format change makes older entries unreadable: they are then ignored, never misread.
constexpr const char* kEngineVersion = "ds4cpp-snapshot-v1v2";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string mb(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  return buf;
}

TokenId special_id(const Tokenizer& tok, std::string_view text) {
  EncodeOptions enc;
  enc.parse_special = true;
  const std::vector<TokenId> ids = tok.encode(text, enc);
  return ids.size() == 1 ? ids[0] : -1;
}
}  // namespace

DiskCache::DiskCache(Engine& engine, DiskCacheOptions opts) : engine_(engine), opts_(std::move(opts)) {}
DiskCache::~DiskCache() = default;

Result<std::unique_ptr<DiskCache>> DiskCache::open(Engine& engine, DiskCacheOptions opts) {
  if (opts.dir.empty()) return invalid_argument("disk KV cache: no directory given");
  if (opts.space_mb == 0) return invalid_argument("disk KV cache: --kv-disk-space-mb must be positive");
  DS4_RETURN_IF_ERROR(kvstore::validate(opts.policy));
  const ModelInfo& info = engine.info();
  if (info.kv_identity.empty()) return invalid_argument("disk KV cache: the engine reports no model identity");
  std::unique_ptr<DiskCache> dc(new DiskCache(engine, std::move(opts)));
  kvstore::StoreOptions so;
  so.dir = dc->opts_.dir;
  so.space_bytes = dc->opts_.space_mb << 20;
  so.reject_different_quant = dc->opts_.reject_different_quant;
  const std::string_view parts[] = {"ds4cpp-kv-identity", info.kv_identity};
  so.model.fingerprint = kvstore::ModelIdentity::fingerprint_of(parts);
  so.model.quant_family = static_cast<uint32_t>(info.routed_expert_bits);
  so.model.engine_version = kEngineVersion;
  so.fsync = dc->opts_.fsync;
  so.log = [d = dc.get()](const std::string& line) { d->log(line); };
  DS4_ASSIGN_OR_RETURN(dc->store_, kvstore::Store::open(std::move(so)));
  dc->user_id_ = special_id(engine.tokenizer(), chat::kUser);
  dc->assistant_id_ = special_id(engine.tokenizer(), chat::kAssistant);
  return dc;
}

void DiskCache::log(const std::string& line) const {
  if (opts_.log) opts_.log("kv-disk: " + line);
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

DiskCacheReport DiskCache::report() const {
  DiskCacheReport r;
  r.cache = stats();
  r.store = store_->stats();
  if (auto u = store_->usage(); u.ok()) r.usage = *u;
  r.limit_bytes = store_->options().space_bytes;
  r.dir = store_->options().dir;
  return r;
}

bool DiskCache::save(Session& s, DiskTimeline& t, kvstore::SaveReason why) {
  const auto t0 = Clock::now();
  const int64_t n = s.position();
  auto fail = [&](const Status& st) {
    t.saved = n;  // not retried at every following token; the next due point tries again
    log(std::string("save (") + kvstore::save_reason_name(why) + ", " + std::to_string(n) +
        " tokens) failed: " + st.to_string());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.save_errors++;
    stats_.save_seconds += seconds_since(t0);
    return false;
  };
  auto snap = s.snapshot(opts_.compact ? SnapshotFormat::compact : SnapshotFormat::f32);
  if (!snap.ok()) return fail(snap.status());
  const std::string text = engine_.tokenizer().decode(s.tokens());
  kvstore::SaveRequest req;
  req.text = text;
  req.tokens = std::span<const int32_t>(s.tokens().data(), s.tokens().size());
  req.logits = s.logits();
  req.payload = snap->bytes;
  req.reason = why;
  req.ctx = static_cast<uint64_t>(s.max_context());
  auto r = store_->save(req);
  if (!r.ok()) return fail(r.status());
  t.saved = n;
  const double secs = seconds_since(t0);
  if (!r->skipped.empty()) {
    log(std::string("save (") + kvstore::save_reason_name(why) + ", " + std::to_string(n) + " tokens) skipped: " +
        r->skipped);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.saves_too_large++;
    stats_.save_seconds += secs;
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.saves[static_cast<size_t>(why)]++;
    if (r->written) stats_.saved_tokens += static_cast<uint64_t>(n);
    stats_.save_seconds += secs;
  }
  char line[256];
  std::snprintf(line, sizeof line, "saved %s checkpoint of %lld tokens: %s, %.0f B/token, %.3f s%s%s",
                kvstore::save_reason_name(why), static_cast<long long>(n), mb(r->file_bytes).c_str(),
                n ? static_cast<double>(r->file_bytes) / static_cast<double>(n) : 0.0, secs,
                r->already_present ? " (already cached)" : "",
                r->evicted_files ? (", evicted " + std::to_string(r->evicted_files) + " file(s)").c_str() : "");
  log(line);
  return true;
}

int64_t DiskCache::admit(Session& s, DiskTimeline& t, std::vector<TokenId>& prompt, int64_t keep) {
  t.cold_at = 0;
  const int64_t pos = s.position();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const kvstore::SavePolicy& p = opts_.policy;
  const Tokenizer& tok = engine_.tokenizer();
  const auto t0 = Clock::now();

  // 1. Look up first: the hit is read and verified into memory before our own evict save below
  //    can make room by evicting it.
  std::optional<kvstore::Hit> hit;
  std::string text;
  if (n_prompt >= p.min_tokens && keep < n_prompt) {
    text = tok.decode(prompt);
    kvstore::LookupRequest lr;
    lr.prompt = text;
    // Only a checkpoint longer than what the live session already gives is worth reading.
    lr.min_tokens = static_cast<uint64_t>(std::max<int64_t>(p.min_tokens, keep + 1));
    lr.max_ctx = static_cast<uint64_t>(s.max_context());
    lr.n_logits = static_cast<uint64_t>(engine_.info().n_vocab);
    auto r = store_->lookup(lr);
    if (!r.ok()) log("lookup failed: " + r.status().to_string());
    else if (*r) hit = std::move(**r);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.lookups++;
    if (!hit) stats_.misses++;
    stats_.lookup_seconds += seconds_since(t0);
  }
  const double lookup_secs = seconds_since(t0);

  // 2. ds4's `evict`: the live tokens this job discards are saved before they are gone.
  save_before_discard(s, t, keep);
  if (keep < pos) {
    if (Status st = s.rewind(keep); !st.ok()) {
      log("rewind to " + std::to_string(keep) + " failed: " + st.to_string());
      return -1;  // the worker starts the slot over
    }
  }
  t.saved = std::min(t.saved, keep);

  // 3. Restore the hit.
  if (hit) {
    const auto t1 = Clock::now();
    kvstore::Entry& e = hit->entry;
    const int64_t n_hit = static_cast<int64_t>(e.tokens.size());
    SessionSnapshot snap{std::move(e.payload)};
    Status st = s.restore(snap);
    // The snapshot carries its own ids and logits; they must be the entry's (both are checked
    // against their checksums, this binds them to each other).
    if (st.ok() && (s.position() != n_hit || !std::equal(e.tokens.begin(), e.tokens.end(), s.tokens().begin()) ||
                    s.logits().size() != e.logits.size() ||
                    std::memcmp(s.logits().data(), e.logits.data(), e.logits.size() * 4) != 0)) {
      st = invalid_data("snapshot tokens/logits differ from the entry's");
    }
    if (!st.ok()) {
      log("restore of " + hit->key.substr(0, 16) + " (" + std::to_string(n_hit) +
          " tokens) failed, prefilling instead: " + st.to_string());
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.restore_errors++;
        stats_.misses++;
        stats_.restore_seconds += seconds_since(t1);
      }
      // A restore that failed validation left the session as it was; one that loaded a state we
      // then rejected is started over (the worker checks position() == the returned count).
      if (s.position() != keep) {
        if (Status rs = s.rewind(0); !rs.ok()) log("rewind after a rejected restore failed: " + rs.to_string());
        keep = 0;
      }
      t.saved = 0;
    } else {
      // Cached ids are authoritative; only the text after them is tokenized again (it may split
      // differently at the boundary than the whole prompt did).
      const bool same_ids = n_hit <= n_prompt && std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin());
      if (!same_ids) {
        EncodeOptions enc;
        enc.parse_special = true;
        std::vector<TokenId> rest = tok.encode(std::string_view(text).substr(e.text.size()), enc);
        prompt.assign(e.tokens.begin(), e.tokens.end());
        prompt.insert(prompt.end(), rest.begin(), rest.end());
      }
      keep = n_hit;
      t.saved = n_hit;
      const double restore_secs = seconds_since(t1);
      const double secs = lookup_secs + restore_secs;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.hits++;
        stats_.restored_tokens += static_cast<uint64_t>(n_hit);
        stats_.restore_seconds += restore_secs;
      }
      char line[200];
      std::snprintf(line, sizeof line, "hit %s: restored %lld of %lld prompt tokens in %.3f s (hits %llu)%s",
                    hit->key.substr(0, 16).c_str(), static_cast<long long>(n_hit),
                    static_cast<long long>(prompt.size()), secs, static_cast<unsigned long long>(hit->hits),
                    same_ids ? "" : ", suffix re-tokenized");
      log(line);
    }
  }

  // 4. Cold: nothing worth mentioning reused. Save the anchor (system prompt + tools) or the
  //    aligned head, so the next request with the same head starts there.
  if (keep < p.min_tokens) {
    const auto anchor = kvstore::find_cold_anchor(std::span<const int32_t>(prompt.data(), prompt.size()), user_id_,
                                                  assistant_id_);
    const auto len = kvstore::cold_save_length(p, static_cast<int64_t>(prompt.size()), anchor);
    if (len && *len > keep) t.cold_at = *len;
  }
  return keep;
}

void DiskCache::save_before_discard(Session& s, DiskTimeline& t, int64_t keep) {
  const int64_t pos = s.position();
  if (keep < pos && t.saved != pos && kvstore::should_save_live(opts_.policy, pos)) save(s, t, kvstore::SaveReason::evict);
}

int64_t DiskCache::prefill_limit(const DiskTimeline& t, int64_t pos, int64_t end) const {
  int64_t lim = end;
  if (t.cold_at > pos) lim = std::min(lim, t.cold_at);
  if (auto next = kvstore::next_continued_save(opts_.policy, t.saved); next && *next > pos) lim = std::min(lim, *next);
  return lim;
}

void DiskCache::after_eval(Session& s, DiskTimeline& t, bool in_tool_call) {
  const int64_t pos = s.position();
  if (t.cold_at > 0 && pos == t.cold_at) {
    t.cold_at = 0;
    save(s, t, kvstore::SaveReason::cold);
    return;
  }
  if (t.cold_at > 0 && pos > t.cold_at) t.cold_at = 0;  // passed it (a step larger than planned)
  if (!in_tool_call && kvstore::continued_save_due(opts_.policy, t.saved, pos)) save(s, t, kvstore::SaveReason::continued);
}

void DiskCache::at_shutdown(Session& s, DiskTimeline& t) {
  const int64_t pos = s.position();
  if (t.saved != pos && kvstore::should_save_live(opts_.policy, pos)) save(s, t, kvstore::SaveReason::shutdown);
}

}  // namespace ds4::server
