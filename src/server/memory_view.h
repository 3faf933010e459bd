// memory_view.h — how the server shows a MemoryReport: the JSON of GET /v1/memory, the Prometheus lines
// of /metrics, and the one-line summary written to the server log at startup and on each /v1/memory
// request. Plain functions of a report snapshot (the engine worker takes the snapshots).
// Deliberately not here: measuring (runtime memory_report), routing (server.cpp).
#pragma once

#include <string>

#include "ds4/memory.h"
#include "server/json_util.h"

namespace ds4::server {

// {"host": {category: bytes, ..., "total"}, "device": {...}, "reconcile": {rss, counted resident, unexplained,
//  weights mapped/resident, device used/total/free/unexplained}, "kv_bytes_per_token": {...},
//  "kv_block_bytes", "sessions": [{id, tokens, bytes: {...}, bytes_per_token: {...}}]}
Json memory_json(const MemoryReport& m);
// Prometheus text: ds4_memory_bytes{place,category}, reconciliation gauges, per-session bytes and tokens.
void append_memory_metrics(std::string& out, const MemoryReport& m);
// "memory: weights 80.8 GiB (mapped; 80.8 GiB resident) | KV 1.2 GiB in 3 sessions (…) | … | RSS … unexplained …"
std::string memory_summary(const MemoryReport& m);

}  // namespace ds4::server
