// store_admin.cpp — directory-wide operations: eviction under the shared budget, list, verify,
// gc and clear. Eviction and gc run under the directory's .lock so that one process at a time
// decides what to delete, against the real total of the directory.
#include <fcntl.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kvstore/kvstore.h"
#include "kvstore/sidecar.h"
#include "kvstore/store_internal.h"

namespace ds4::kvstore {

using namespace internal;

namespace {

struct Candidate {
  std::string key;
  uint64_t bytes = 0;       // entry + its sidecar
  double score = 0;
  uint64_t last_used = 0;
};

}  // namespace

Result<uint64_t> Store::evict_to(uint64_t budget, const std::string& protect_key, GcReport* report) {
  auto lock_fd = open_file(path(kLockName), O_RDWR | O_CREAT, 0644);
  if (!lock_fd.ok()) {
    if (lock_fd.status().code() == StatusCode::not_found) return uint64_t{0};  // directory wiped
    return lock_fd.status();
  }
  DS4_ASSIGN_OR_RETURN(FlockGuard dir_lock, FlockGuard::lock(lock_fd->get(), true, false));
  auto listing = list_dir(opts_.dir);
  if (!listing.ok()) return listing.status().code() == StatusCode::not_found ? Result<uint64_t>(uint64_t{0})
                                                                              : Result<uint64_t>(listing.status());
  const uint64_t t = now();
  uint64_t total = 0;
  std::map<std::string, uint64_t> entry_bytes, meta_bytes;
  for (const DirEntry& d : *listing) {
    std::string stem;
    const FileKind kind = classify(d.name, &stem);
    total += d.bytes;
    if (kind == FileKind::entry) entry_bytes[stem] = d.bytes;
    if (kind == FileKind::meta) meta_bytes[stem] = d.bytes;
    // A temp file this old belongs to a writer that died; live writers finish in seconds.
    if (kind == FileKind::temp && d.mtime_unix >= 0 &&
        t > static_cast<uint64_t>(d.mtime_unix) + opts_.stale_temp_seconds) {
      if (remove_file(path(d.name)).ok()) {
        total -= d.bytes;
        if (report) ++report->removed_temp;
      }
    }
  }
  if (report) report->bytes_before = total;
  // Sidecars whose entry is gone (evicted elsewhere, or damaged and removed).
  for (const auto& [stem, bytes] : meta_bytes) {
    if (entry_bytes.count(stem)) continue;
    if (remove_file(path(meta_name(stem))).ok()) {
      total -= bytes;
      if (report) ++report->removed_orphans;
    }
  }
  uint64_t evicted = 0;
  if (total > budget) {
    std::vector<Candidate> cands;
    for (const auto& [stem, bytes] : entry_bytes) {
      Candidate c;
      c.key = stem;
      c.bytes = bytes + (meta_bytes.count(stem) ? meta_bytes[stem] : 0);
      auto m = read_meta(path(meta_name(stem)));
      uint64_t tokens = m ? m->n_tokens : 0;
      uint64_t hits = m ? m->hits : 0;
      c.last_used = m ? m->last_used_unix : 0;
      if (!m) {  // no statistics: take the token count from the header, treat as never used
        if (auto e = open_entry(path(entry_name(stem)), opts_.limits); e.ok()) tokens = e->header.n_tokens;
      }
      // ds4's score: (decayed hits + 1) * tokens / bytes; the lowest goes first.
      const double age = t > c.last_used ? static_cast<double>(t - c.last_used) : 0.0;
      const double eff_hits = static_cast<double>(hits) * std::exp2(-age / std::max(1.0, opts_.hit_half_life_seconds));
      c.score = (eff_hits + 1.0) * static_cast<double>(tokens) / static_cast<double>(std::max<uint64_t>(bytes, 1));
      cands.push_back(std::move(c));
    }
    std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
      if (a.score != b.score) return a.score < b.score;
      return a.last_used < b.last_used;
    });
    // The just-written entry goes last, and only if it alone exceeds the budget.
    std::stable_partition(cands.begin(), cands.end(), [&](const Candidate& c) { return c.key != protect_key; });
    for (const Candidate& c : cands) {
      if (total <= budget) break;
      if (c.key == protect_key && total - c.bytes > 0 && c.bytes <= budget) break;
      const std::string file = path(entry_name(c.key));
      auto fd = open_file(file, O_RDONLY);
      if (!fd.ok()) {
        total -= std::min(total, c.bytes);  // already gone
        continue;
      }
      // A reader holds a shared lock while it reads: skip the entry rather than wait.
      auto excl = FlockGuard::lock(fd->get(), true, true);
      if (!excl.ok()) continue;
      if (remove_file(file).ok()) {
        (void)remove_file(path(meta_name(c.key)));
        total -= std::min(total, c.bytes);
        ++evicted;
        count([&](StoreStats& s) {
          s.evicted_entries++;
          s.evicted_bytes += c.bytes;
        });
        log("kv cache: evicted " + c.key.substr(0, 12) + " (" + std::to_string(c.bytes) + " bytes)");
      }
    }
  }
  if (report) {
    report->evicted_entries += evicted;
    report->bytes_after = total;
  }
  return evicted;
}

Result<std::vector<EntryInfo>> Store::list() const {
  DS4_ASSIGN_OR_RETURN(std::vector<DirEntry> listing, list_dir(opts_.dir));
  std::vector<EntryInfo> out;
  for (const DirEntry& d : listing) {
    std::string stem;
    if (classify(d.name, &stem) != FileKind::entry) continue;
    EntryInfo info;
    info.key = stem;
    info.file_bytes = d.bytes;
    auto e = open_entry(path(d.name), opts_.limits);
    if (e.ok()) {
      info.header = e->header;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(e->header.text_bytes, 80));
      info.text_head.resize(n);
      if (!pread_all(e->fd.get(), kHeaderBytes, info.text_head.data(), n, d.name).ok()) info.text_head.clear();
    } else {
      if (e.status().code() == StatusCode::not_found) continue;
      info.header_error = e.status().to_string();
    }
    if (auto m = read_meta(path(meta_name(stem)))) info.meta = *m;
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) {
    return a.meta.last_used_unix != b.meta.last_used_unix ? a.meta.last_used_unix > b.meta.last_used_unix
                                                          : a.key < b.key;
  });
  return out;
}

Result<VerifyReport> Store::verify(bool remove_bad) {
  DS4_ASSIGN_OR_RETURN(std::vector<DirEntry> listing, list_dir(opts_.dir));
  VerifyReport rep;
  for (const DirEntry& d : listing) {
    std::string stem;
    if (classify(d.name, &stem) != FileKind::entry) continue;
    ++rep.entries;
    const std::string file = path(d.name);
    std::string why;
    uint64_t inode = d.inode;
    auto e = open_entry(file, opts_.limits);
    if (!e.ok()) {
      if (e.status().code() == StatusCode::not_found) {
        --rep.entries;
        continue;
      }
      why = e.status().to_string();
    } else {
      inode = e->inode;
      Result<Entry> body = invalid_data("unread");
      {
        auto lock = FlockGuard::lock(e->fd.get(), false, false);
        body = read_entry(*e, codecs_, opts_.limits);
      }
      if (!body.ok()) {
        why = body.status().to_string();
      } else {
        // The name must be the key of the content under the writer's own namespace.
        Sha256 h;
        const Digest salt = namespace_salt(e->header.model_fingerprint, e->header.engine_version);
        h.update(salt.data(), salt.size());
        h.update(body->text);
        if (h.peek() != e->header.key || to_hex(e->header.key) != stem) why = "invalid_data: name is not the content's key";
      }
    }
    if (why.empty()) {
      ++rep.ok;
      continue;
    }
    ++rep.bad;
    rep.problems.push_back(stem + ": " + why);
    // Never remove what is only unreadable to us (newer format, unknown codec).
    if (remove_bad && why.rfind("unsupported", 0) != 0) {
      remove_if_same(file, inode);
      (void)remove_file(path(meta_name(stem)));
      ++rep.removed;
    }
  }
  return rep;
}

Result<GcReport> Store::gc(uint64_t space_bytes) {
  GcReport rep;
  DS4_ASSIGN_OR_RETURN(uint64_t evicted, evict_to(space_bytes, std::string(), &rep));
  (void)evicted;
  // Compact the index: drop records whose entry no longer exists.
  DS4_ASSIGN_OR_RETURN(std::vector<DirEntry> listing, list_dir(opts_.dir));
  uint64_t total = 0;
  for (const DirEntry& d : listing) {
    std::string stem;
    if (classify(d.name, &stem) != FileKind::index) continue;
    std::vector<IndexRecord> keep;
    std::vector<IndexRecord> recs = read_index(path(d.name));
    for (const IndexRecord& r : recs) {
      if (::access(path(entry_name(to_hex(r.key))).c_str(), F_OK) == 0) keep.push_back(r);
    }
    if (keep.size() != recs.size() || d.bytes != recs.size() * 64) {
      rep.index_records_dropped += recs.size() - keep.size();
      (void)rewrite_index(path(d.name), keep);
    }
  }
  if (auto u = usage_bytes(); u.ok()) total = *u;
  rep.bytes_after = total;
  return rep;
}

Result<uint64_t> Store::clear() {
  auto listing = list_dir(opts_.dir);
  if (!listing.ok()) return listing.status().code() == StatusCode::not_found ? Result<uint64_t>(uint64_t{0})
                                                                              : Result<uint64_t>(listing.status());
  uint64_t n = 0;
  for (const DirEntry& d : *listing) {
    const FileKind k = classify(d.name, nullptr);
    if (k == FileKind::other || k == FileKind::lock) continue;
    if (remove_file(path(d.name)).ok()) ++n;
  }
  return n;
}

Result<uint64_t> Store::usage_bytes() const {
  DS4_ASSIGN_OR_RETURN(DirUsage u, usage());
  return u.bytes;
}

Result<DirUsage> Store::usage() const {
  auto listing = list_dir(opts_.dir);
  if (!listing.ok()) return listing.status().code() == StatusCode::not_found ? Result<DirUsage>(DirUsage{})
                                                                              : Result<DirUsage>(listing.status());
  DirUsage u;
  for (const DirEntry& d : *listing) {
    u.bytes += d.bytes;
    if (classify(d.name, nullptr) == FileKind::entry) ++u.entries;
  }
  return u;
}

}  // namespace ds4::kvstore
