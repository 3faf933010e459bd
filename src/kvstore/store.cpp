// store.cpp — Store construction, save and lookup (see kvstore.h for the directory design).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "kvstore/kvstore.h"
#include "kvstore/sidecar.h"
#include "kvstore/store_internal.h"

namespace ds4::kvstore {

namespace internal {

FileKind classify(const std::string& name, std::string* stem) {
  if (name == kLockName) return FileKind::lock;
  if (name.rfind("tmp.", 0) == 0) return FileKind::temp;
  auto ext_is = [&](const char* ext) {
    const size_t n = std::strlen(ext);
    if (name.size() != 64 + n || name.compare(64, n, ext) != 0) return false;
    Digest d;
    if (!from_hex(std::string_view(name).substr(0, 64), d)) return false;
    if (stem) *stem = name.substr(0, 64);
    return true;
  };
  if (ext_is(".kv")) return FileKind::entry;
  if (ext_is(".meta")) return FileKind::meta;
  if (ext_is(".idx")) return FileKind::index;
  return FileKind::other;
}

Result<OpenedEntry> open_entry(const std::string& path, const ParseLimits& limits) {
  DS4_ASSIGN_OR_RETURN(Fd fd, open_file(path, O_RDONLY));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return io_error("kvstore: fstat " + path);
  OpenedEntry e;
  e.file_bytes = static_cast<uint64_t>(st.st_size);
  e.inode = static_cast<uint64_t>(st.st_ino);
  uint8_t hdr[kHeaderBytes];
  if (e.file_bytes < kHeaderBytes) return invalid_data("kvstore: file shorter than the header (truncated)");
  DS4_RETURN_IF_ERROR(pread_all(fd.get(), 0, hdr, kHeaderBytes, path));
  DS4_ASSIGN_OR_RETURN(e.header, parse_header(hdr, e.file_bytes, limits));
  e.fd = std::move(fd);
  return e;
}

Result<Entry> read_entry(const OpenedEntry& e, std::span<const PayloadCodec* const> codecs, const ParseLimits& limits) {
  const int fd = e.fd.get();
  ReadAt read = [fd](uint64_t off, void* dst, size_t n) { return pread_all(fd, off, dst, n, "entry"); };
  return read_entry_body(e.header, read, codecs, limits);
}

void remove_if_same(const std::string& path, uint64_t inode) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == inode) (void)remove_file(path);
}

}  // namespace internal

using namespace internal;

Digest ModelIdentity::fingerprint_of(std::span<const std::string_view> parts) {
  Sha256 h;
  for (std::string_view p : parts) {
    const uint64_t n = p.size();
    h.update(&n, sizeof n);
    h.update(p);
  }
  return h.peek();
}

Digest namespace_salt(const Digest& fingerprint, std::string_view engine_version) {
  Sha256 h;
  h.update(std::string_view("ds4cpp-kvstore-namespace-v1", 27));
  h.update(fingerprint.data(), fingerprint.size());
  const uint64_t n = engine_version.size();
  h.update(&n, sizeof n);
  h.update(engine_version);
  return h.peek();
}

Store::Store(StoreOptions opts) : opts_(std::move(opts)) {
  salt_ = namespace_salt(opts_.model.fingerprint, opts_.model.engine_version);
  if (opts_.codec) codecs_.push_back(opts_.codec);
  for (const PayloadCodec* c : opts_.extra_codecs)
    if (c) codecs_.push_back(c);
}
Store::~Store() = default;

const char* rejection_name(Rejection r) {
  switch (r) {
    case Rejection::corrupt: return "corrupt";
    case Rejection::model_version: return "model_or_version";
    case Rejection::quant: return "quant";
    case Rejection::unsupported: return "unsupported";
    case Rejection::ctx: return "ctx";
    case Rejection::vocab: return "vocab";
    case Rejection::mismatch: return "mismatch";
    case Rejection::unreadable: return "unreadable";
  }
  return "unknown";
}

StoreStats Store::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Store::reject(Rejection why) {
  count([why](StoreStats& s) { s.rejected[static_cast<size_t>(why)]++; });
}

Result<std::unique_ptr<Store>> Store::open(StoreOptions opts) {
  if (opts.dir.empty()) return invalid_argument("kvstore: --kv-disk-dir is empty");
  if (opts.model.engine_version.size() > kEngineVersionBytes)
    return invalid_argument("kvstore: engine version longer than 32 bytes");
  if (opts.index_stride_bytes == 0) return invalid_argument("kvstore: index stride must be > 0");
  while (opts.dir.size() > 1 && opts.dir.back() == '/') opts.dir.pop_back();
  DS4_RETURN_IF_ERROR(make_dirs(opts.dir).with_context("kvstore: --kv-disk-dir"));
  std::unique_ptr<Store> s(new Store(std::move(opts)));
  auto ev = s->evict_to(s->opts_.space_bytes, std::string(), nullptr);
  if (!ev.ok()) s->log("kv cache: eviction at open failed: " + ev.status().to_string());
  return s;
}

uint64_t Store::now() const { return opts_.clock ? opts_.clock() : static_cast<uint64_t>(std::time(nullptr)); }

void Store::log(const std::string& line) const {
  if (opts_.log) opts_.log(line);
}

Digest Store::key_of(std::string_view text) const {
  Sha256 h;
  h.update(salt_.data(), salt_.size());
  h.update(text);
  return h.peek();
}

namespace {

// Writes header + sections (with zero padding) to fd.
Status write_entry(int fd, const EntryHeader& h, const SaveRequest& req, std::span<const uint8_t> stored,
                   const std::string& what) {
  const EntryLayout l = layout_of(h);
  static const uint8_t kZeros[64] = {};
  auto hdr = encode_header(h);
  uint64_t at = 0;
  auto put = [&](uint64_t off, const void* p, uint64_t n) -> Status {
    if (off > at) DS4_RETURN_IF_ERROR(write_all(fd, kZeros, off - at, what));
    DS4_RETURN_IF_ERROR(write_all(fd, p, n, what));
    at = off + n;
    return Status::Ok();
  };
  DS4_RETURN_IF_ERROR(put(0, hdr.data(), hdr.size()));
  DS4_RETURN_IF_ERROR(put(l.text_off, req.text.data(), req.text.size()));
  DS4_RETURN_IF_ERROR(put(l.tokens_off, req.tokens.data(), req.tokens.size_bytes()));
  DS4_RETURN_IF_ERROR(put(l.logits_off, req.logits.data(), req.logits.size_bytes()));
  DS4_RETURN_IF_ERROR(put(l.payload_off, stored.data(), stored.size()));
  return Status::Ok();
}

}  // namespace

Result<SaveResult> Store::save(const SaveRequest& req) {
  if (req.tokens.empty()) return invalid_argument("kvstore: save of an empty prefix");
  if (req.text.empty()) return invalid_argument("kvstore: save without rendered text");
  if (req.tokens.size() > opts_.limits.max_tokens || req.logits.size() > opts_.limits.max_logits)
    return invalid_argument("kvstore: prefix or logits larger than the store accepts");
  SaveResult res;
  const Digest key = key_of(req.text);
  res.key = to_hex(key);
  const std::string final_path = path(entry_name(res.key));
  const uint64_t t = now();
  const MetaRecord fresh{0, t, t, req.tokens.size(), 0};

  // Same text already cached by a compatible writer: the payload is immutable, so only refresh
  // its statistics (ds4 rewrites only its tool-map trailer here).
  if (auto old = open_entry(final_path, opts_.limits); old.ok()) {
    const EntryHeader& h = old->header;
    if (h.key == key && h.model_fingerprint == opts_.model.fingerprint &&
        h.engine_version == opts_.model.engine_version && h.quant_family == opts_.model.quant_family &&
        h.n_tokens == req.tokens.size()) {
      res.already_present = true;
      res.file_bytes = old->file_bytes;
      MetaRecord m = fresh;
      m.entry_bytes = old->file_bytes;
      (void)init_meta(path(meta_name(res.key)), m);
      (void)append_index(path(index_name(to_hex(key_of(req.text.substr(
                             0, req.text.size() / opts_.index_stride_bytes * opts_.index_stride_bytes))))),
                         {req.text.size(), req.tokens.size(), key});
      return res;
    }
  }

  std::vector<uint8_t> encoded;
  std::span<const uint8_t> stored = req.payload;
  const PayloadCodec& codec = opts_.codec ? *opts_.codec : identity_codec();
  if (codec.id() != 0) {
    auto enc = codec.encode(req.payload);
    if (!enc.ok()) return enc.status().with_context("kvstore: payload codec");
    encoded = std::move(enc).value();
    stored = encoded;
  }
  EntryHeader h;
  h.engine_version = opts_.model.engine_version;
  h.model_fingerprint = opts_.model.fingerprint;
  h.quant_family = opts_.model.quant_family;
  h.reason = req.reason;
  h.codec_id = codec.id();
  h.ctx = req.ctx;
  h.created_unix = t;
  h.key = key;
  fill_section_digests(h, req.text, req.tokens, req.logits, stored, req.payload.size());
  const uint64_t bytes = layout_of(h).end;
  res.file_bytes = bytes;
  // ds4: skip when the estimate with 1% slack exceeds the whole budget.
  if (static_cast<double>(bytes) * 1.01 > static_cast<double>(opts_.space_bytes)) {
    res.skipped = "entry of " + std::to_string(bytes) + " bytes exceeds --kv-disk-space-mb";
    log("kv cache: not saving " + res.key.substr(0, 12) + ": " + res.skipped);
    return res;
  }

  // Atomic publish; the directory may have been wiped since open, so recreate it once.
  std::string tmp;
  Status st;
  for (int attempt = 0; attempt < 2; ++attempt) {
    tmp = path(temp_name(res.key.substr(0, 16)));
    auto fd = open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (!fd.ok()) {
      st = fd.status();
      if (st.code() == StatusCode::not_found && attempt == 0 && make_dirs(opts_.dir).ok()) continue;
      break;
    }
    st = write_entry(fd->get(), h, req, stored, tmp);
    if (st.ok() && opts_.fsync && ::fsync(fd->get()) != 0) st = io_error("kvstore: fsync " + tmp);
    if (st.ok()) {
      st = opts_.fsync ? publish(opts_.dir, tmp, final_path)
                       : (::rename(tmp.c_str(), final_path.c_str()) == 0 ? Status::Ok()
                                                                          : io_error("kvstore: rename " + tmp));
    }
    if (!st.ok()) (void)remove_file(tmp);
    break;
  }
  if (!st.ok()) return st.with_context("kvstore: save " + res.key.substr(0, 12));
  res.written = true;
  count([bytes](StoreStats& s) {
    s.files_written++;
    s.bytes_written += bytes;
  });

  MetaRecord m = fresh;
  m.entry_bytes = bytes;
  if (Status ms = init_meta(path(meta_name(res.key)), m); !ms.ok()) log("kv cache: " + ms.to_string());
  const uint64_t bucket_len = req.text.size() / opts_.index_stride_bytes * opts_.index_stride_bytes;
  const std::string idx = path(index_name(to_hex(key_of(req.text.substr(0, bucket_len)))));
  if (Status is = append_index(idx, {req.text.size(), req.tokens.size(), key}); !is.ok())
    log("kv cache: " + is.to_string());

  auto ev = evict_to(opts_.space_bytes, res.key, nullptr);
  if (ev.ok()) {
    res.evicted_files = *ev;
  } else {
    log("kv cache: eviction failed: " + ev.status().to_string());
  }
  log("kv cache: saved " + res.key.substr(0, 12) + " (" + save_reason_name(req.reason) + ", " +
      std::to_string(req.tokens.size()) + " tokens, " + std::to_string(bytes) + " bytes)");
  return res;
}

Result<std::optional<Hit>> Store::lookup(const LookupRequest& req) {
  const std::string_view p = req.prompt;
  const uint64_t stride = opts_.index_stride_bytes;
  // One pass over the prompt: the hash state at every stride boundary (k = 0 .. p.size()/stride).
  std::vector<Sha256> at_boundary;
  {
    Sha256 h;
    h.update(salt_.data(), salt_.size());
    at_boundary.push_back(h);
    for (uint64_t off = 0; off + stride <= p.size(); off += stride) {
      h.update(p.data() + off, stride);
      at_boundary.push_back(h);
    }
  }
  for (size_t k = at_boundary.size(); k-- > 0;) {
    const uint64_t base = k * stride;
    std::vector<IndexRecord> recs = read_index(path(index_name(to_hex(at_boundary[k].peek()))));
    std::sort(recs.begin(), recs.end(),
              [](const IndexRecord& a, const IndexRecord& b) { return a.text_bytes > b.text_bytes; });
    for (const IndexRecord& r : recs) {
      // Records are hints: anything outside this bucket, the prompt, or the limits is ignored.
      if (r.text_bytes < base || r.text_bytes >= base + stride || r.text_bytes > p.size() ||
          r.text_bytes == 0 || r.n_tokens < req.min_tokens)
        continue;
      Sha256 h = at_boundary[k];
      h.update(p.data() + base, r.text_bytes - base);
      const Digest key = h.peek();
      if (key != r.key) continue;  // an entry under this bucket that is not a prefix of this prompt
      const std::string hex = to_hex(key);
      const std::string file = path(entry_name(hex));
      auto opened = open_entry(file, opts_.limits);
      if (!opened.ok()) {
        if (opened.status().code() == StatusCode::not_found) continue;  // evicted or wiped
        if (opened.status().code() == StatusCode::invalid_data) {
          reject(Rejection::corrupt);
          log("kv cache: removing damaged " + hex.substr(0, 12) + ": " + opened.status().message());
          struct stat st;
          if (::stat(file.c_str(), &st) == 0) remove_if_same(file, static_cast<uint64_t>(st.st_ino));
        } else {
          reject(Rejection::unreadable);
          log("kv cache: skipping " + hex.substr(0, 12) + ": " + opened.status().to_string());
        }
        continue;
      }
      const EntryHeader& eh = opened->header;
      std::string why;
      Rejection kind = Rejection::mismatch;
      if (eh.key != key) {
        why = "header key differs from its name";
      } else if (eh.model_fingerprint != opts_.model.fingerprint || eh.engine_version != opts_.model.engine_version) {
        why = "written by another model or engine version";
        kind = Rejection::model_version;
      } else if (eh.quant_family != opts_.model.quant_family && opts_.reject_different_quant) {
        why = "quant family " + std::to_string(eh.quant_family) + " != " + std::to_string(opts_.model.quant_family);
        kind = Rejection::quant;
      } else if (eh.text_bytes != r.text_bytes || eh.n_tokens < req.min_tokens) {
        why = "size differs from the index";
      } else if (req.max_ctx && eh.ctx > req.max_ctx) {
        why = "written with ctx " + std::to_string(eh.ctx) + " > " + std::to_string(req.max_ctx);
        kind = Rejection::ctx;
      } else if (req.n_logits && eh.n_logits != req.n_logits) {
        why = "logit count " + std::to_string(eh.n_logits) + " != " + std::to_string(req.n_logits);
        kind = Rejection::vocab;
      }
      if (!why.empty()) {
        reject(kind);
        log("kv cache: skipping " + hex.substr(0, 12) + ": " + why);
        continue;
      }
      Result<Entry> entry = invalid_data("unread");
      {
        // Shared lock while reading: the evictor will not unlink what a reader holds.
        auto lock = FlockGuard::lock(opened->fd.get(), false, false);
        entry = read_entry(*opened, codecs_, opts_.limits);
      }
      count([&](StoreStats& s) {
        s.files_read++;
        s.bytes_read += opened->file_bytes;
      });
      if (!entry.ok()) {
        if (entry.status().code() == StatusCode::unsupported) {
          reject(Rejection::unsupported);
          log("kv cache: skipping " + hex.substr(0, 12) + ": " + entry.status().message());
        } else {
          reject(Rejection::corrupt);
          log("kv cache: removing damaged " + hex.substr(0, 12) + ": " + entry.status().message());
          remove_if_same(file, opened->inode);
        }
        continue;
      }
      // Final guard against a wrong answer: the cached text really is this prompt's prefix.
      if (entry->text.size() != r.text_bytes || std::memcmp(entry->text.data(), p.data(), r.text_bytes) != 0) {
        reject(Rejection::mismatch);
        log("kv cache: skipping " + hex.substr(0, 12) + ": text is not a prefix of the prompt");
        continue;
      }
      Hit hit;
      hit.key = hex;
      hit.entry = std::move(entry).value();
      const MetaRecord fallback{0, now(), eh.created_unix, eh.n_tokens, opened->file_bytes};
      auto m = bump_meta(path(meta_name(hex)), now(), fallback);
      hit.hits = m.ok() ? m->hits : 1;
      log("kv cache: hit " + hex.substr(0, 12) + " (" + std::to_string(eh.n_tokens) + " tokens, " +
          std::to_string(eh.text_bytes) + " bytes of text, hits " + std::to_string(hit.hits) + ")");
      return std::optional<Hit>(std::move(hit));
    }
  }
  return std::optional<Hit>();
}

}  // namespace ds4::kvstore
