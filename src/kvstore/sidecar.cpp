// sidecar.cpp — meta (hit statistics) and idx (prefix index) records (see sidecar.h).
#include "kvstore/sidecar.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "kvstore/fs_ops.h"

namespace ds4::kvstore {

namespace {

constexpr size_t kRecordBytes = 64;
constexpr uint8_t kMetaMagic[8] = {'D', 'S', '4', 'K', 'V', 'M', 0, 1};

// 8-byte checksum: a prefix of SHA-256 over the record's first 56 bytes.
void seal(uint8_t* rec) {
  Digest d = sha256(rec, 56);
  std::memcpy(rec + 56, d.data(), 8);
}
bool sealed(const uint8_t* rec) {
  Digest d = sha256(rec, 56);
  return std::memcmp(rec + 56, d.data(), 8) == 0;
}

void encode_meta(const MetaRecord& m, uint8_t* rec) {
  std::memset(rec, 0, kRecordBytes);
  std::memcpy(rec, kMetaMagic, 8);
  const uint64_t v[5] = {m.hits, m.last_used_unix, m.created_unix, m.n_tokens, m.entry_bytes};
  std::memcpy(rec + 8, v, sizeof v);
  seal(rec);
}
std::optional<MetaRecord> decode_meta(const uint8_t* rec) {
  if (std::memcmp(rec, kMetaMagic, 8) != 0 || !sealed(rec)) return std::nullopt;
  uint64_t v[5];
  std::memcpy(v, rec + 8, sizeof v);
  return MetaRecord{v[0], v[1], v[2], v[3], v[4]};
}

std::optional<MetaRecord> read_meta_fd(int fd) {
  uint8_t rec[kRecordBytes];
  if (!pread_all(fd, 0, rec, kRecordBytes, "meta").ok()) return std::nullopt;
  return decode_meta(rec);
}

void encode_index(const IndexRecord& r, uint8_t* rec) {
  std::memset(rec, 0, kRecordBytes);
  std::memcpy(rec, &r.text_bytes, 8);
  std::memcpy(rec + 8, &r.n_tokens, 8);
  std::memcpy(rec + 16, r.key.data(), 32);
  seal(rec);
}

}  // namespace

std::optional<MetaRecord> read_meta(const std::string& path) {
  auto fd = open_file(path, O_RDONLY);
  if (!fd.ok()) return std::nullopt;
  auto lock = FlockGuard::lock(fd->get(), /*exclusive=*/false, /*try_only=*/false);
  if (!lock.ok()) return std::nullopt;
  return read_meta_fd(fd->get());
}

Status init_meta(const std::string& path, const MetaRecord& fresh) {
  DS4_ASSIGN_OR_RETURN(Fd fd, open_file(path, O_RDWR | O_CREAT, 0644));
  DS4_ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::lock(fd.get(), true, false));
  MetaRecord m = fresh;
  if (auto old = read_meta_fd(fd.get())) {
    m.hits = old->hits;
    if (old->created_unix) m.created_unix = old->created_unix;
  }
  uint8_t rec[kRecordBytes];
  encode_meta(m, rec);
  if (::pwrite(fd.get(), rec, kRecordBytes, 0) != static_cast<ssize_t>(kRecordBytes))
    return io_error("kvstore: cannot write " + path);
  return Status::Ok();
}

Result<MetaRecord> bump_meta(const std::string& path, uint64_t now_unix, const MetaRecord& fallback) {
  DS4_ASSIGN_OR_RETURN(Fd fd, open_file(path, O_RDWR | O_CREAT, 0644));
  DS4_ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::lock(fd.get(), true, false));
  MetaRecord m = read_meta_fd(fd.get()).value_or(fallback);
  m.hits += 1;
  m.last_used_unix = now_unix;
  uint8_t rec[kRecordBytes];
  encode_meta(m, rec);
  if (::pwrite(fd.get(), rec, kRecordBytes, 0) != static_cast<ssize_t>(kRecordBytes))
    return io_error("kvstore: cannot write " + path);
  return m;
}

namespace {
std::vector<IndexRecord> read_index_fd(int fd, size_t max_records) {
  std::vector<IndexRecord> out;
  auto size = file_size(fd);
  if (!size.ok()) return out;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(*size / kRecordBytes, max_records));
  std::vector<uint8_t> buf(n * kRecordBytes);
  if (n == 0 || !pread_all(fd, 0, buf.data(), buf.size(), "index").ok()) return out;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* rec = buf.data() + i * kRecordBytes;
    if (!sealed(rec)) continue;  // torn or damaged record: skip it, keep the rest
    IndexRecord r;
    std::memcpy(&r.text_bytes, rec, 8);
    std::memcpy(&r.n_tokens, rec + 8, 8);
    std::memcpy(r.key.data(), rec + 16, 32);
    out.push_back(r);
  }
  return out;
}
}  // namespace

Status append_index(const std::string& path, const IndexRecord& rec) {
  DS4_ASSIGN_OR_RETURN(Fd fd, open_file(path, O_RDWR | O_CREAT, 0644));
  DS4_ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::lock(fd.get(), true, false));
  for (const IndexRecord& r : read_index_fd(fd.get(), 1u << 20))
    if (r.key == rec.key) return Status::Ok();
  DS4_ASSIGN_OR_RETURN(uint64_t size, file_size(fd.get()));
  uint8_t buf[kRecordBytes];
  encode_index(rec, buf);
  // Write at the next record boundary so a torn earlier record cannot misalign later ones.
  const uint64_t at = (size + kRecordBytes - 1) / kRecordBytes * kRecordBytes;
  if (::pwrite(fd.get(), buf, kRecordBytes, static_cast<off_t>(at)) != static_cast<ssize_t>(kRecordBytes))
    return io_error("kvstore: cannot append to " + path);
  return Status::Ok();
}

std::vector<IndexRecord> read_index(const std::string& path, size_t max_records) {
  auto fd = open_file(path, O_RDONLY);
  if (!fd.ok()) return {};
  auto lock = FlockGuard::lock(fd->get(), false, false);
  if (!lock.ok()) return {};
  return read_index_fd(fd->get(), max_records);
}

Status rewrite_index(const std::string& path, const std::vector<IndexRecord>& recs) {
  auto fdr = open_file(path, O_RDWR);
  if (!fdr.ok()) return fdr.status().code() == StatusCode::not_found ? Status::Ok() : fdr.status();
  Fd fd = std::move(fdr).value();
  DS4_ASSIGN_OR_RETURN(FlockGuard lock, FlockGuard::lock(fd.get(), true, false));
  // Rewritten in place, never unlinked: an appender waiting for this lock holds the same inode,
  // and its record must land in the file lookups read.
  std::vector<uint8_t> buf(recs.size() * kRecordBytes);
  for (size_t i = 0; i < recs.size(); ++i) encode_index(recs[i], buf.data() + i * kRecordBytes);
  if ((!buf.empty() && ::pwrite(fd.get(), buf.data(), buf.size(), 0) != static_cast<ssize_t>(buf.size())) ||
      ::ftruncate(fd.get(), static_cast<off_t>(buf.size())) != 0)
    return io_error("kvstore: cannot rewrite " + path);
  return Status::Ok();
}

}  // namespace ds4::kvstore
