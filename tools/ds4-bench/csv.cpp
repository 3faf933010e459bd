// csv.cpp — see csv.h.
#include "csv.h"

#include <cstdio>

namespace ds4::bench {

std::string csv_header() {
  std::string h =
      "frontier,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kv_bytes,snapshot_bytes,rss_bytes,device_used_bytes";
  for (const char* scope : {"session_", "process_"})
    for (int c = 0; c < kMemCategoryCount; ++c) {
      h += ',';
      h += scope;
      h += mem_category_name(static_cast<MemCategory>(c));
    }
  return h;
}

std::string csv_line(const FrontierRow& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%lld,%lld,%.3f,%lld,%.3f,%llu,%llu,%llu,%llu", static_cast<long long>(r.frontier),
                static_cast<long long>(r.prefill_tokens), r.prefill_tps, static_cast<long long>(r.gen_tokens),
                r.gen_tps, static_cast<unsigned long long>(r.kv_bytes),
                static_cast<unsigned long long>(r.snapshot_bytes), static_cast<unsigned long long>(r.rss_bytes),
                static_cast<unsigned long long>(r.device_used_bytes));
  std::string line = buf;
  for (const MemBytes* m : {&r.session, &r.process})
    for (int c = 0; c < kMemCategoryCount; ++c) {
      line += ',';
      line += std::to_string(m->bytes[c]);
    }
  return line;
}

}  // namespace ds4::bench
