// disk_cache_view.h — how the server shows the disk KV cache (--kv-disk-dir): its Prometheus lines in
// GET /metrics and its object in GET /v1/memory, both plain functions of one DiskCacheReport (taken by
// DiskCache::report(): the cache's counters, the store's counters and a listing of the directory).
// Deliberately not here: counting (disk_cache.cpp, kvstore/store*.cpp), routing (server.cpp). Nothing
// is shown when the server runs without a disk cache.
#pragma once

#include <string>

#include "server/disk_cache.h"
#include "server/json_util.h"

namespace ds4::server {

// ds4_kv_disk_* counters and gauges (docs/KV_CACHE.md "Metrics" lists them).
void append_disk_cache_metrics(std::string& out, const DiskCacheReport& r);
// {"dir", "limit_bytes", "usage_bytes", "entries", "lookups", "hits", "misses", "restored_tokens",
//  "saves": {reason: n}, "rejected": {reason: n}, ...}: the same numbers as the metrics.
Json disk_cache_json(const DiskCacheReport& r);

}  // namespace ds4::server
