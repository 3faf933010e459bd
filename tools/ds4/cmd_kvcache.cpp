// cmd_kvcache.cpp — `ds4 kvcache --dir DIR [ls|verify|gc|clear]`: inspect and maintain a disk KV
// cache directory (the one ds4-server uses with --kv-disk-dir), safely while servers use it:
//   ls       one line per entry: key, tokens, bytes, reason, quant family, hits, last use, text head
//   verify   reads every entry completely and checks every checksum (--fix removes damaged ones;
//            exit 1 when damage was found and left)
//   gc       evicts to --space-mb (the same score and lock the servers use), removes crashed
//            writers' temp files and orphan sidecars, compacts the prefix index
//   clear    removes every cache file (files that are not the cache's are left alone)
// Deliberately not here: opening a model (entries of every model are shown; compatibility is
// decided by the server at lookup).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>

#include "kvstore/kvstore.h"

const char* ds4_cmd_kvcache_help() { return "inspect/maintain a disk KV cache directory (ls, verify, gc, clear)"; }

namespace {

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += '.';
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string age(uint64_t then) {
  if (!then) return "never";
  const int64_t d = static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(then);
  if (d < 120) return std::to_string(d) + "s";
  if (d < 7200) return std::to_string(d / 60) + "m";
  if (d < 172800) return std::to_string(d / 3600) + "h";
  return std::to_string(d / 86400) + "d";
}

}  // namespace

int ds4_cmd_kvcache(int argc, char** argv) {
  using namespace ds4::kvstore;
  CLI::App app{"ds4 kvcache — inspect and maintain a disk KV cache directory (safe while servers use it)."};
  std::string dir, action = "ls";
  uint64_t space_mb = 4096;
  bool fix = false;
  app.add_option("--dir,--kv-disk-dir", dir, "cache directory")->required();
  app.add_option("action", action, "ls | verify | gc | clear")
      ->check(CLI::IsMember({"ls", "verify", "gc", "clear"}))
      ->capture_default_str();
  app.add_option("--space-mb,--kv-disk-space-mb", space_mb, "gc: budget for the whole directory in MiB")
      ->capture_default_str();
  app.add_flag("--fix", fix, "verify: remove damaged entries");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (action != "gc" && app.count("--space-mb")) {
    std::fprintf(stderr, "ds4 kvcache: --space-mb only applies to gc\n");
    return 2;
  }
  StoreOptions opts;
  opts.dir = dir;
  opts.space_bytes = UINT64_MAX;  // opening must not evict; gc evicts to --space-mb
  opts.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (action != "clear" && action != "gc") {
    std::error_code ec;  // ls/verify never create the directory
    if (!std::filesystem::is_directory(dir, ec)) {
      std::fprintf(stderr, "ds4 kvcache: cannot open directory '%s'\n", dir.c_str());
      return 1;
    }
  }
  auto store = Store::open(opts);
  if (!store.ok()) {
    std::fprintf(stderr, "ds4 kvcache: %s\n", store.status().to_string().c_str());
    return 1;
  }
  Store& s = **store;

  if (action == "ls") {
    auto list = s.list();
    if (!list.ok()) {
      std::fprintf(stderr, "ds4 kvcache: %s\n", list.status().to_string().c_str());
      return 1;
    }
    uint64_t total = 0;
    std::printf("%-16s %8s %12s %-9s %5s %6s %6s  %s\n", "key", "tokens", "bytes", "reason", "quant", "hits",
                "used", "text");
    for (const EntryInfo& e : *list) {
      total += e.file_bytes;
      if (!e.header) {
        std::printf("%-16s %8s %12llu %-9s %5s %6s %6s  (%s)\n", e.key.substr(0, 16).c_str(), "?",
                    static_cast<unsigned long long>(e.file_bytes), "damaged", "?", "?", "?", e.header_error.c_str());
        continue;
      }
      std::printf("%-16s %8llu %12llu %-9s %5u %6llu %6s  %s\n", e.key.substr(0, 16).c_str(),
                  static_cast<unsigned long long>(e.header->n_tokens), static_cast<unsigned long long>(e.file_bytes),
                  save_reason_name(e.header->reason), e.header->quant_family,
                  static_cast<unsigned long long>(e.meta.hits), age(e.meta.last_used_unix).c_str(),
                  printable(e.text_head).c_str());
    }
    auto usage = s.usage_bytes();
    std::printf("%zu entries, %llu bytes in entries, %llu bytes in the directory\n", list->size(),
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(usage.ok() ? *usage : 0));
    return 0;
  }
  if (action == "verify") {
    auto rep = s.verify(fix);
    if (!rep.ok()) {
      std::fprintf(stderr, "ds4 kvcache: %s\n", rep.status().to_string().c_str());
      return 1;
    }
    for (const std::string& p : rep->problems) std::printf("bad: %s\n", p.c_str());
    std::printf("%llu entries: %llu ok, %llu bad, %llu removed\n", static_cast<unsigned long long>(rep->entries),
                static_cast<unsigned long long>(rep->ok), static_cast<unsigned long long>(rep->bad),
                static_cast<unsigned long long>(rep->removed));
    return rep->bad > rep->removed ? 1 : 0;
  }
  if (action == "gc") {
    auto rep = s.gc(space_mb << 20);
    if (!rep.ok()) {
      std::fprintf(stderr, "ds4 kvcache: %s\n", rep.status().to_string().c_str());
      return 1;
    }
    std::printf("gc: %llu -> %llu bytes (budget %llu); evicted %llu, temp files %llu, orphan sidecars %llu, "
                "index records dropped %llu\n",
                static_cast<unsigned long long>(rep->bytes_before), static_cast<unsigned long long>(rep->bytes_after),
                static_cast<unsigned long long>(space_mb << 20), static_cast<unsigned long long>(rep->evicted_entries),
                static_cast<unsigned long long>(rep->removed_temp), static_cast<unsigned long long>(rep->removed_orphans),
                static_cast<unsigned long long>(rep->index_records_dropped));
    return 0;
  }
  auto n = s.clear();
  if (!n.ok()) {
    std::fprintf(stderr, "ds4 kvcache: %s\n", n.status().to_string().c_str());
    return 1;
  }
  std::printf("removed %llu files\n", static_cast<unsigned long long>(*n));
  return 0;
}
