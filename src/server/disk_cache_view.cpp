// disk_cache_view.cpp — see disk_cache_view.h. Names follow metrics.cpp: ds4_ prefix, _total for
// counters, base units (bytes, seconds) in the name.
#include "server/disk_cache_view.h"

#include "server/prom_text.h"

namespace ds4::server {

namespace {

// The save reasons a server writes (SaveReason::unknown is only for files of other writers).
constexpr kvstore::SaveReason kReasons[] = {kvstore::SaveReason::cold, kvstore::SaveReason::continued,
                                            kvstore::SaveReason::evict, kvstore::SaveReason::shutdown};

uint64_t saves(const DiskCacheStats& s, kvstore::SaveReason r) { return s.saves[static_cast<size_t>(r)]; }

}  // namespace

void append_disk_cache_metrics(std::string& out, const DiskCacheReport& r) {
  const DiskCacheStats& c = r.cache;
  const kvstore::StoreStats& st = r.store;
  prom_metric(out, "ds4_kv_disk_lookups_total", "counter", "Prompts looked up in the disk KV cache", c.lookups);
  prom_metric(out, "ds4_kv_disk_hits_total", "counter", "Lookups that restored a checkpoint from disk", c.hits);
  prom_metric(out, "ds4_kv_disk_misses_total", "counter",
              "Lookups without a usable checkpoint (none found, or its restore failed)", c.misses);
  prom_metric(out, "ds4_kv_disk_restored_tokens_total", "counter", "Prompt tokens restored from disk, not prefilled",
              c.restored_tokens);
  prom_header(out, "ds4_kv_disk_saves_total", "counter",
              "Checkpoints saved (written, or already on disk) by save point: cold, continued, evict, shutdown");
  for (kvstore::SaveReason why : kReasons)
    prom_sample(out, "ds4_kv_disk_saves_total", "reason", save_reason_name(why), saves(c, why));
  prom_header(out, "ds4_kv_disk_save_failures_total", "counter",
              "Checkpoints not saved: error (snapshot or I/O), too_large (one entry over --kv-disk-space-mb)");
  prom_sample(out, "ds4_kv_disk_save_failures_total", "cause", "error", c.save_errors);
  prom_sample(out, "ds4_kv_disk_save_failures_total", "cause", "too_large", c.saves_too_large);
  prom_metric(out, "ds4_kv_disk_saved_tokens_total", "counter", "Tokens in the checkpoints this process wrote",
              c.saved_tokens);
  prom_metric(out, "ds4_kv_disk_written_files_total", "counter", "Entry files this process wrote", st.files_written);
  prom_metric(out, "ds4_kv_disk_write_bytes_total", "counter", "Bytes of the entry files this process wrote",
              st.bytes_written);
  prom_metric(out, "ds4_kv_disk_read_files_total", "counter", "Entry files read in full by lookups (hits and rejected)",
              st.files_read);
  prom_metric(out, "ds4_kv_disk_read_bytes_total", "counter", "Bytes of the entry files read in full by lookups",
              st.bytes_read);
  prom_metric(out, "ds4_kv_disk_save_seconds_total", "counter",
              "Time spent saving checkpoints (snapshot, encode, write, fsync, eviction)", c.save_seconds);
  prom_metric(out, "ds4_kv_disk_lookup_seconds_total", "counter", "Time spent in lookups (index, read, checksums)",
              c.lookup_seconds);
  prom_metric(out, "ds4_kv_disk_restore_seconds_total", "counter", "Time spent restoring found checkpoints into sessions",
              c.restore_seconds);
  prom_metric(out, "ds4_kv_disk_evictions_total", "counter",
              "Entries this process evicted to stay under --kv-disk-space-mb", st.evicted_entries);
  prom_metric(out, "ds4_kv_disk_evicted_bytes_total", "counter", "Bytes this process evicted (entries and sidecars)",
              st.evicted_bytes);
  prom_header(out, "ds4_kv_disk_rejected_total", "counter",
              "Cache files a lookup refused, by reason (corrupt ones are deleted; restore = refused by the session)");
  for (size_t i = 0; i < kvstore::kRejectionCount; ++i)
    prom_sample(out, "ds4_kv_disk_rejected_total", "reason", kvstore::rejection_name(static_cast<kvstore::Rejection>(i)),
                st.rejected[i]);
  prom_sample(out, "ds4_kv_disk_rejected_total", "reason", "restore", c.restore_errors);
  // Gauges of the whole directory (other processes' files included); absent when it cannot be listed.
  if (r.usage) {
    prom_metric(out, "ds4_kv_disk_usage_bytes", "gauge", "Bytes of all files in --kv-disk-dir", r.usage->bytes);
    prom_metric(out, "ds4_kv_disk_entries", "gauge", "Checkpoint entries in --kv-disk-dir", r.usage->entries);
  }
  prom_metric(out, "ds4_kv_disk_limit_bytes", "gauge", "Disk KV cache budget (--kv-disk-space-mb)", r.limit_bytes);
}

Json disk_cache_json(const DiskCacheReport& r) {
  const DiskCacheStats& c = r.cache;
  const kvstore::StoreStats& st = r.store;
  Json saves_by = Json::object();
  for (kvstore::SaveReason why : kReasons) saves_by[save_reason_name(why)] = saves(c, why);
  Json rejected = Json::object();
  for (size_t i = 0; i < kvstore::kRejectionCount; ++i)
    rejected[kvstore::rejection_name(static_cast<kvstore::Rejection>(i))] = st.rejected[i];
  rejected["restore"] = c.restore_errors;
  Json j = {{"dir", r.dir},
            {"limit_bytes", r.limit_bytes},
            {"usage_bytes", r.usage ? Json(r.usage->bytes) : Json()},
            {"entries", r.usage ? Json(r.usage->entries) : Json()},
            {"lookups", c.lookups},
            {"hits", c.hits},
            {"misses", c.misses},
            {"restored_tokens", c.restored_tokens},
            {"saves", saves_by},
            {"save_failures", {{"error", c.save_errors}, {"too_large", c.saves_too_large}}},
            {"saved_tokens", c.saved_tokens},
            {"written_files", st.files_written},
            {"write_bytes", st.bytes_written},
            {"read_files", st.files_read},
            {"read_bytes", st.bytes_read},
            {"save_seconds", c.save_seconds},
            {"lookup_seconds", c.lookup_seconds},
            {"restore_seconds", c.restore_seconds},
            {"evictions", st.evicted_entries},
            {"evicted_bytes", st.evicted_bytes},
            {"rejected", rejected}};
  return j;
}

}  // namespace ds4::server
