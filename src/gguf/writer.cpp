// writer.cpp — gguf::Writer: streams a GGUF v3 file (or memory image) from a layout and a payload
// callback, producing payloads on up to n_threads threads while writing them strictly in order.
//
// Memory: the head (metadata + directory) plus at most n_threads tensor buffers, one per worker,
// so a 90 GB file needs a few tensors' worth of RAM. Files are written to a temp file next to the
// target, fsync'ed and renamed, so readers never see a half-written model. Deliberately not here:
// encoding/validation (layout.cpp), quantization (src/quant).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <random>
#include <thread>

#include "gguf/gguf.h"
#include "gguf/layout.h"
#include "gguf/parse.h"

namespace ds4::gguf {

struct Writer::Impl {
  std::vector<KeyValue> metadata;
  std::vector<TensorSpec> tensors;
};

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::add(std::string key, Value value) { impl_->metadata.push_back({std::move(key), std::move(value)}); }
void Writer::add_u32(std::string key, uint32_t v) { add(std::move(key), Value::of_u32(v)); }
void Writer::add_u64(std::string key, uint64_t v) { add(std::move(key), Value::of_u64(v)); }
void Writer::add_i32(std::string key, int32_t v) { add(std::move(key), Value::of_i32(v)); }
void Writer::add_i64(std::string key, int64_t v) { add(std::move(key), Value::of_i64(v)); }
void Writer::add_f32(std::string key, float v) { add(std::move(key), Value::of_f32(v)); }
void Writer::add_f64(std::string key, double v) { add(std::move(key), Value::of_f64(v)); }
void Writer::add_bool(std::string key, bool v) { add(std::move(key), Value::of_bool(v)); }
void Writer::add_string(std::string key, std::string v) { add(std::move(key), Value::of_string(std::move(v))); }
void Writer::add_array(std::string key, ValueType elem_type, std::vector<Value> items) {
  add(std::move(key), Value::of_array(elem_type, std::move(items)));
}
void Writer::add_tensor(TensorSpec spec) { impl_->tensors.push_back(std::move(spec)); }
size_t Writer::n_tensors() const { return impl_->tensors.size(); }

namespace {

// Where the bytes go. skip() leaves zeros behind: a hole in a file, appended zeros in memory.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status write(const uint8_t* p, size_t n) = 0;
  virtual Status skip(uint64_t n) = 0;
  Status zeros(uint64_t n) {
    static constexpr uint8_t kZero[4096] = {};
    while (n > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof kZero));
      DS4_RETURN_IF_ERROR(write(kZero, k));
      n -= k;
    }
    return Status::Ok();
  }
};

class MemorySink final : public Sink {
 public:
  explicit MemorySink(std::vector<uint8_t>* out) : out_(out) {}
  Status write(const uint8_t* p, size_t n) override {
    out_->insert(out_->end(), p, p + n);
    return Status::Ok();
  }
  Status skip(uint64_t n) override {
    out_->resize(out_->size() + n, 0);
    return Status::Ok();
  }

 private:
  std::vector<uint8_t>* out_;
};

class FileSink final : public Sink {
 public:
  FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {}
  Status write(const uint8_t* p, size_t n) override {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return fail("write", errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
      pos_ += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }
  Status skip(uint64_t n) override {
    if (n == 0) return Status::Ok();
    if (lseek(fd_, static_cast<off_t>(pos_ + n), SEEK_SET) < 0) return fail("seek", errno);
    pos_ += n;
    return Status::Ok();
  }
  // Sets the final size (a trailing hole needs it) and makes the bytes durable before the rename.
  Status finish(uint64_t total) {
    if (ftruncate(fd_, static_cast<off_t>(total)) != 0) return fail("ftruncate", errno);
    if (fsync(fd_) != 0) return fail("fsync", errno);
    return Status::Ok();
  }
  Status fail(const char* op, int err) const {
    return io_error("gguf writer: " + std::string(op) + " '" + path_ + "' at byte " + std::to_string(pos_) + ": " +
                    std::strerror(err));
  }

 private:
  int fd_;
  std::string path_;
  uint64_t pos_ = 0;
};

struct Job {
  const std::vector<TensorSpec>& tensors;
  const detail::Layout& layout;
  const PayloadFn& payload;
  const std::function<bool(size_t)>& hole;
  bool is_hole(size_t i) const { return hole && hole(i); }
};

// Fills `buf` with tensor i's payload: zeroed first, so every thread count yields the same bytes
// even when a callback leaves some untouched. Exceptions are turned into Status here because a
// worker thread must never let one escape.
Status produce(const Job& job, size_t i, std::vector<uint8_t>& buf) {
  const std::string ctx = "gguf writer: tensor '" + job.tensors[i].name + "' (index " + std::to_string(i) + ")";
  if (job.is_hole(i)) {  // written by write_one as a skip: no buffer, no callback
    buf.clear();
    return Status::Ok();
  }
  try {
    buf.assign(static_cast<size_t>(job.layout.sizes[i]), 0);
    Status st = job.payload(i, std::span<uint8_t>(buf.data(), buf.size()));
    return st.with_context(ctx);
  } catch (const std::bad_alloc&) {
    return out_of_memory(ctx + ": cannot allocate " + std::to_string(job.layout.sizes[i]) + " bytes");
  } catch (const std::exception& e) {
    return internal_error(ctx + ": payload callback threw: " + e.what());
  } catch (...) {
    return internal_error(ctx + ": payload callback threw");
  }
}

Status write_one(const Job& job, size_t i, const std::vector<uint8_t>& buf, Sink& sink) {
  if (job.is_hole(i)) return sink.skip(detail::align_up(job.layout.sizes[i], job.layout.alignment));
  DS4_RETURN_IF_ERROR(sink.write(buf.data(), buf.size()));
  return sink.zeros(detail::align_up(job.layout.sizes[i], job.layout.alignment) - job.layout.sizes[i]);
}

// Worker w produces tensors w, w+n, w+2n, ... into its own slot; the calling thread writes slot
// i % n for i = 0, 1, 2, ... So at most n payloads exist at once and the output order is fixed.
Status emit_parallel(const Job& job, size_t n_threads, Sink& sink) {
  const size_t n_tensors = job.tensors.size();
  struct Slot {
    std::vector<uint8_t> buf;
    bool ready = false;
    Status status;
  };
  std::vector<Slot> slots(n_threads);
  std::mutex mu;
  std::condition_variable cv;
  bool abort = false;

  auto worker = [&](size_t w) {
    for (size_t i = w; i < n_tensors; i += n_threads) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return abort || !slots[w].ready; });
        if (abort) return;
      }
      Status st = produce(job, i, slots[w].buf);
      bool failed = !st.ok();
      {
        std::lock_guard<std::mutex> lock(mu);
        slots[w].status = std::move(st);
        slots[w].ready = true;
      }
      cv.notify_all();
      if (failed) return;
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(n_threads);
  Status result;
  try {
    for (size_t w = 0; w < n_threads; ++w) threads.emplace_back(worker, w);
  } catch (const std::system_error& e) {
    result = internal_error(std::string("gguf writer: cannot start a payload thread: ") + e.what());
  }
  for (size_t i = 0; result.ok() && i < n_tensors; ++i) {
    Slot& s = slots[i % n_threads];
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return s.ready; });
    }
    // A ready slot is not touched by its worker until we clear `ready`, so no lock is needed here.
    result = s.status.ok() ? write_one(job, i, s.buf, sink) : s.status;
    {
      std::lock_guard<std::mutex> lock(mu);
      s.ready = false;
    }
    cv.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    abort = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  return result;
}

Status emit(const Job& job, const WriteOptions& opts, Sink& sink) {
  const detail::Layout& L = job.layout;
  DS4_RETURN_IF_ERROR(sink.write(L.head.data(), L.head.size()));
  DS4_RETURN_IF_ERROR(sink.zeros(L.data_offset - L.head.size()));
  if (!job.payload) return sink.skip(L.total_size - L.data_offset);  // all-zero tensors
  size_t n_threads = static_cast<size_t>(std::max(1, opts.n_threads));
  n_threads = std::min(n_threads, std::max<size_t>(1, job.tensors.size()));
  if (n_threads > 1) return emit_parallel(job, n_threads, sink);
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < job.tensors.size(); ++i) {
    DS4_RETURN_IF_ERROR(produce(job, i, buf));
    DS4_RETURN_IF_ERROR(write_one(job, i, buf, sink));
  }
  return Status::Ok();
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Creates "<path>.tmp-<random>" with O_EXCL (mode 0666 minus the umask, like a plain open).
Status create_temp(const std::string& path, std::string* tmp, int* fd) {
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp-%08x%08x", rd(), rd());
    *tmp = path + suffix;
    *fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (*fd >= 0) return Status::Ok();
    if (errno != EEXIST) {
      int err = errno;
      return io_error("gguf writer: cannot create '" + *tmp + "': " + std::strerror(err));
    }
  }
  return io_error("gguf writer: cannot create a unique temp file next to '" + path + "'");
}

}  // namespace

Status Writer::write(const std::string& path, const PayloadFn& payload, const WriteOptions& opts) {
  detail::Layout layout;
  DS4_RETURN_IF_ERROR(detail::build_layout(impl_->metadata, impl_->tensors, opts.alignment, &layout));
  std::string tmp;
  int fd = -1;
  DS4_RETURN_IF_ERROR(create_temp(path, &tmp, &fd));
  FileSink sink(fd, path);
  Job job{impl_->tensors, layout, payload, opts.hole};
  Status st = emit(job, opts, sink);
  if (st.ok()) st = sink.finish(layout.total_size);
  if (::close(fd) != 0 && st.ok()) st = sink.fail("close", errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    st = io_error("gguf writer: cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // Make the rename itself durable; some filesystems refuse fsync on a directory (EINVAL): fine.
  int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> Writer::write_to_memory(const PayloadFn& payload, const WriteOptions& opts) {
  detail::Layout layout;
  DS4_RETURN_IF_ERROR(detail::build_layout(impl_->metadata, impl_->tensors, opts.alignment, &layout));
  std::vector<uint8_t> out;
  try {
    out.reserve(static_cast<size_t>(layout.total_size));
  } catch (const std::exception&) {
    return out_of_memory("gguf writer: cannot hold a " + std::to_string(layout.total_size) + "-byte image in memory");
  }
  MemorySink sink(&out);
  Job job{impl_->tensors, layout, payload, opts.hole};
  try {
    DS4_RETURN_IF_ERROR(emit(job, opts, sink));
  } catch (const std::bad_alloc&) {
    return out_of_memory("gguf writer: out of memory while building the image");
  }
  return out;
}

}  // namespace ds4::gguf
