// csv.h — ds4-bench's CSV: the header and one line per frontier (FrontierRow).
//
// Columns: frontier, prefill_tokens, prefill_tps, gen_tokens, gen_tps, kv_bytes, snapshot_bytes,
// rss_bytes, device_used_bytes, then session_<category> for every MemCategory (the session's bytes,
// host + device) and process_<category> for every MemCategory (the whole process). Category names
// are mem_category_name()'s. Deliberately not here: measuring (bench_loop.h).
#pragma once

#include <string>

#include "bench_loop.h"

namespace ds4::bench {

std::string csv_header();              // no trailing newline
std::string csv_line(const FrontierRow& row);  // no trailing newline

}  // namespace ds4::bench
