// fs_ops.cpp — POSIX file helpers for the store (see fs_ops.h).
#include "kvstore/fs_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace ds4::kvstore {

namespace {
Status errno_status(const std::string& what) {
  const int e = errno;
  std::string m = what + ": " + std::strerror(e);
  if (e == ENOENT || e == ESTALE) return not_found(m);
  if (e == ENOSPC || e == EDQUOT) return out_of_memory(m);
  return io_error(m);
}
}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}
Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Result<Fd> open_file(const std::string& path, int flags, unsigned mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno_status("open " + path);
  return Fd(fd);
}

Status write_all(int fd, const void* data, size_t n, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("write " + what);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status pread_all(int fd, uint64_t offset, void* dst, size_t n, const std::string& what) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_status("read " + what);
    }
    if (r == 0) return invalid_data("kvstore: " + what + " ends early (truncated)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

Result<uint64_t> file_size(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return errno_status("fstat");
  return static_cast<uint64_t>(st.st_size);
}

FlockGuard::~FlockGuard() {
  if (fd_ >= 0) ::flock(fd_, LOCK_UN);
}

Result<FlockGuard> FlockGuard::lock(int fd, bool exclusive, bool try_only) {
  int op = (exclusive ? LOCK_EX : LOCK_SH) | (try_only ? LOCK_NB : 0);
  for (;;) {
    if (::flock(fd, op) == 0) return FlockGuard(fd);
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return unavailable("kvstore: file is locked by another user");
    return errno_status("flock");
  }
}

std::string temp_name(const std::string& tag) {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  char buf[64];
  std::snprintf(buf, sizeof buf, ".%ld.%016llx", static_cast<long>(::getpid()), static_cast<unsigned long long>(r));
  return "tmp." + tag + buf;
}

Status make_dirs(const std::string& path) {
  if (path.empty()) return invalid_argument("kvstore: empty directory name");
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return errno_status("mkdir " + cur);
    i = j + 1;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_status("stat " + path);
  if (!S_ISDIR(st.st_mode)) return invalid_argument("kvstore: '" + path + "' is not a directory");
  return Status::Ok();
}

Status fsync_dir(const std::string& dir) {
  auto fd = open_file(dir, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return fd.status();
  if (::fsync(fd->get()) != 0 && errno != EINVAL) return errno_status("fsync " + dir);
  return Status::Ok();
}

Status publish(const std::string& dir, const std::string& temp_path, const std::string& final_path) {
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) return errno_status("rename to " + final_path);
  return fsync_dir(dir);
}

Result<std::vector<DirEntry>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return errno_status("opendir " + dir);
  std::vector<DirEntry> out;
  const int dfd = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
    struct stat st;
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished
    if (!S_ISREG(st.st_mode)) continue;
    out.push_back({e->d_name, static_cast<uint64_t>(st.st_size), static_cast<int64_t>(st.st_mtime),
                   static_cast<uint64_t>(st.st_ino)});
  }
  ::closedir(d);
  return out;
}

Status remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_status("unlink " + path);
  return Status::Ok();
}

}  // namespace ds4::kvstore
