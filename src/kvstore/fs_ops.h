// fs_ops.h — the POSIX pieces the store is built from: an owning fd, whole reads/writes, flock
// guards, atomic publish (unique temp file in the same directory + fsync + rename + directory
// fsync) and a tolerant directory listing. Every function reports errors as Status; a file that
// vanished between two calls is reported as not_found, which callers treat as a miss.
// Deliberately not here: cache policy, file names, formats.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ds4/status.h"

namespace ds4::kvstore {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC; ENOENT becomes not_found, others io_error.
Result<Fd> open_file(const std::string& path, int flags, unsigned mode = 0644);
Status write_all(int fd, const void* data, size_t n, const std::string& what);
// Reads exactly n bytes at offset; a short read (file shrank) is invalid_data.
Status pread_all(int fd, uint64_t offset, void* dst, size_t n, const std::string& what);
Result<uint64_t> file_size(int fd);

// flock(2) held for the guard's lifetime on an fd the guard does not own.
class FlockGuard {
 public:
  FlockGuard() = default;
  ~FlockGuard();
  FlockGuard(FlockGuard&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FlockGuard& operator=(FlockGuard&&) = delete;
  FlockGuard(const FlockGuard&) = delete;
  bool held() const { return fd_ >= 0; }
  // exclusive or shared; with `try_only`, returns unavailable instead of waiting.
  static Result<FlockGuard> lock(int fd, bool exclusive, bool try_only);

 private:
  explicit FlockGuard(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// "tmp.<tag>.<pid>.<16 hex random>" — unique per writer even across processes and threads.
std::string temp_name(const std::string& tag);

// mkdir -p.
Status make_dirs(const std::string& path);
Status fsync_dir(const std::string& dir);

// rename(2) of a fully written, fsynced temp file onto its final name, then a directory fsync.
Status publish(const std::string& dir, const std::string& temp_path, const std::string& final_path);

struct DirEntry {
  std::string name;
  uint64_t bytes = 0;
  int64_t mtime_unix = 0;
  uint64_t inode = 0;
};
// Regular files of `dir` (names and stat data only; files that vanish mid-listing are skipped).
Result<std::vector<DirEntry>> list_dir(const std::string& dir);

// unlink(2) that treats "already gone" as success.
Status remove_file(const std::string& path);

}  // namespace ds4::kvstore
