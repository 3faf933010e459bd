// memory_view.cpp — see memory_view.h.
#include "server/memory_view.h"

#include "server/prom_text.h"

#include <cstdio>

namespace ds4::server {

static const MemCategory kKv[] = {MemCategory::raw_kv, MemCategory::compressed_kv_r4, MemCategory::compressed_kv_rhc,
                                  MemCategory::indexer_kv, MemCategory::compressor_state};

static Json bytes_json(const MemBytes& b) {
  Json j = Json::object();
  for (int c = 0; c < kMemCategoryCount; ++c) j[mem_category_name(static_cast<MemCategory>(c))] = b.bytes[c];
  j["total"] = b.total();
  return j;
}

Json memory_json(const MemoryReport& m) {
  Json j = Json::object();
  j["host"] = bytes_json(m.host);
  j["device"] = bytes_json(m.device);
  const uint64_t counted_resident = m.host.total() - m.host_mapped_weights + m.host_weights_resident;
  j["reconcile"] = {{"host_rss", m.host_rss},
                    {"host_counted_resident", counted_resident},
                    {"host_unexplained", m.host_unexplained},
                    {"weights_mapped", m.host_mapped_weights},
                    {"weights_resident", m.host_weights_resident},
                    {"device_total", m.device_total},
                    {"device_free", m.device_free},
                    {"device_used", m.device_total - m.device_free},
                    {"device_unexplained", m.device_unexplained}};
  Json rate = Json::object();
  double total = 0;
  for (MemCategory c : kKv) {
    rate[mem_category_name(c)] = m.kv_bytes_per_token[static_cast<size_t>(c)];
    total += m.kv_bytes_per_token[static_cast<size_t>(c)];
  }
  rate["total"] = total;
  j["kv_bytes_per_token"] = rate;
  j["kv_block_bytes"] = m.kv_block_bytes;
  Json sessions = Json::array();
  for (const SessionMemory& s : m.sessions) {
    MemBytes both = s.host;
    for (int c = 0; c < kMemCategoryCount; ++c) both.bytes[c] += s.device.bytes[c];
    Json per = Json::object();
    for (int c = 0; c < kMemCategoryCount; ++c)
      per[mem_category_name(static_cast<MemCategory>(c))] = per_token(s, static_cast<MemCategory>(c));
    per["total"] = s.tokens > 0 ? static_cast<double>(both.total()) / static_cast<double>(s.tokens) : 0.0;
    sessions.push_back({{"id", s.session_id},
                        {"tokens", s.tokens},
                        {"place", s.device.total() ? "device" : "host"},
                        {"bytes", bytes_json(both)},
                        {"bytes_per_token", per}});
  }
  j["sessions"] = sessions;
  return j;
}

void append_memory_metrics(std::string& out, const MemoryReport& m) {
  prom_header(out, "ds4_memory_bytes", "gauge", "Memory counted where allocated, by category and place (host/device)");
  for (int c = 0; c < kMemCategoryCount; ++c) {
    const char* name = mem_category_name(static_cast<MemCategory>(c));
    out += std::string("ds4_memory_bytes{place=\"host\",category=\"") + name + "\"} " + std::to_string(m.host.bytes[c]) + "\n";
    out += std::string("ds4_memory_bytes{place=\"device\",category=\"") + name + "\"} " +
           std::to_string(m.device.bytes[c]) + "\n";
  }
  prom_header(out, "ds4_host_rss_bytes", "gauge", "Resident set size of the server process (VmRSS)");
  out += "ds4_host_rss_bytes " + std::to_string(m.host_rss) + "\n";
  prom_header(out, "ds4_weights_mapped_bytes", "gauge", "Bytes of the memory-mapped GGUF the weights are bound to");
  out += "ds4_weights_mapped_bytes " + std::to_string(m.host_mapped_weights) + "\n";
  prom_header(out, "ds4_weights_resident_bytes", "gauge", "Of the mapped weights, bytes resident in RAM now (mincore)");
  out += "ds4_weights_resident_bytes " + std::to_string(m.host_weights_resident) + "\n";
  prom_header(out, "ds4_memory_unexplained_bytes", "gauge",
       "What the OS (RSS) or the driver (used device memory) reports beyond the counted bytes; may be negative");
  out += "ds4_memory_unexplained_bytes{place=\"host\"} " + std::to_string(m.host_unexplained) + "\n";
  out += "ds4_memory_unexplained_bytes{place=\"device\"} " + std::to_string(m.device_unexplained) + "\n";
  prom_header(out, "ds4_device_memory_bytes", "gauge", "Device memory as cudaMemGetInfo reports it (0 on the CPU backend)");
  out += "ds4_device_memory_bytes{kind=\"total\"} " + std::to_string(m.device_total) + "\n";
  out += "ds4_device_memory_bytes{kind=\"free\"} " + std::to_string(m.device_free) + "\n";
  prom_header(out, "ds4_kv_bytes_per_token", "gauge", "Growth of one session's KV per token, by category");
  for (MemCategory c : kKv) {
    out += std::string("ds4_kv_bytes_per_token{category=\"") + mem_category_name(c) + "\"} " +
           prom_number(m.kv_bytes_per_token[static_cast<size_t>(c)]) + "\n";
  }
  prom_header(out, "ds4_sessions", "gauge", "Live sessions (KV timelines)");
  out += "ds4_sessions " + std::to_string(m.sessions.size()) + "\n";
  prom_header(out, "ds4_session_tokens", "gauge", "Tokens held by each live session");
  for (const SessionMemory& s : m.sessions)
    out += "ds4_session_tokens{session=\"" + std::to_string(s.session_id) + "\"} " + std::to_string(s.tokens) + "\n";
  prom_header(out, "ds4_session_memory_bytes", "gauge", "Bytes held by each live session, by category");
  for (const SessionMemory& s : m.sessions)
    for (int c = 0; c < kMemCategoryCount; ++c) {
      const uint64_t b = s.host.bytes[c] + s.device.bytes[c];
      if (!b) continue;
      out += "ds4_session_memory_bytes{session=\"" + std::to_string(s.session_id) + "\",category=\"" +
             mem_category_name(static_cast<MemCategory>(c)) + "\"} " + std::to_string(b) + "\n";
    }
}

static std::string mib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  return buf;
}

std::string memory_summary(const MemoryReport& m) {
  const bool dev = m.device.total() > 0;
  const MemBytes& kvside = dev ? m.device : m.host;
  uint64_t kv = 0;
  for (MemCategory c : kKv) kv += kvside[c];
  int64_t tokens = 0;
  for (const auto& s : m.sessions) tokens += s.tokens;
  std::string s = "memory: weights " + mib(static_cast<double>(m.host_mapped_weights)) + " mapped (" +
                  mib(static_cast<double>(m.host_weights_resident)) + " resident)";
  if (dev) s += ", " + mib(static_cast<double>(m.device[MemCategory::weights])) + " on device";
  s += " | KV " + mib(static_cast<double>(kv)) + " in " + std::to_string(m.sessions.size()) + " session(s), " +
       std::to_string(tokens) + " tokens (";
  bool first = true;
  for (MemCategory c : kKv) {
    s += std::string(first ? "" : ", ") + mem_category_name(c) + " " + mib(static_cast<double>(kvside[c]));
    first = false;
  }
  double rate = 0;
  for (MemCategory c : kKv) rate += m.kv_bytes_per_token[static_cast<size_t>(c)];
  char r[48];
  std::snprintf(r, sizeof r, "; +%.0f B/token", rate);
  s += r;
  s += ") | scratch " + mib(static_cast<double>(m.host[MemCategory::scratch] + m.device[MemCategory::scratch])) +
       " | other " + mib(static_cast<double>(m.host[MemCategory::other])) + " | RSS " +
       mib(static_cast<double>(m.host_rss)) + ", unexplained " + mib(static_cast<double>(m.host_unexplained));
  if (m.device_total)
    s += " | device used " + mib(static_cast<double>(m.device_total - m.device_free)) + " of " +
         mib(static_cast<double>(m.device_total)) + ", unexplained " + mib(static_cast<double>(m.device_unexplained));
  return s;
}

}  // namespace ds4::server
