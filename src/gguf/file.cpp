// file.cpp — gguf::File: the read-only mapping, lookups and typed getters over a parsed image.
//
// The file is mapped PROT_READ + MAP_PRIVATE and never copied; parse.cpp validates it before any
// accessor can run. Deliberately not handled: a file truncated by another process while mapped
// (the kernel raises SIGBUS on access; ds4 has the same limitation).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gguf/gguf.h"
#include "gguf/parse.h"

namespace ds4::gguf {

struct File::Impl {
  std::string path;
  const uint8_t* base = nullptr;  // [file_size] bytes: the mapping or the caller's buffer
  uint64_t size = 0;
  void* map = nullptr;  // owned mapping (nullptr for from_memory and empty files)
  size_t map_len = 0;
  detail::ParsedImage img;

  ~Impl() {
    if (map) munmap(map, map_len);
  }
};

File::File() : impl_(std::make_unique<Impl>()) {}
File::~File() = default;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Reads one byte per page so every page is resident before the first token (ds4 --warm-weights).
// MAP_POPULATE usually did this already; the loop makes it certain and is cheap when it did.
void touch_pages(const uint8_t* p, uint64_t n) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (uint64_t off = 0; off < n; off += page) sink = sink + p[off];
  (void)sink;
}

}  // namespace

Result<std::unique_ptr<File>> File::open(const std::string& path, const OpenOptions& opts) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = "gguf: cannot open '" + path + "': " + errno_text(err);
    if (err == ENOENT) return not_found(msg);
    return io_error(msg);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("gguf: cannot stat '" + path + "': " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("gguf: '" + path + "' is not a regular file");
  }
  std::unique_ptr<File> f(new File());
  Impl& im = *f->impl_;
  im.path = path;
  im.size = static_cast<uint64_t>(st.st_size);
  if (im.size > 0) {
    int flags = MAP_PRIVATE | (opts.populate ? MAP_POPULATE : 0);
    void* m = mmap(nullptr, static_cast<size_t>(im.size), PROT_READ, flags, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return io_error("gguf: cannot mmap '" + path + "' (" + std::to_string(im.size) + " bytes): " + errno_text(err));
    }
    im.map = m;
    im.map_len = static_cast<size_t>(im.size);
    im.base = static_cast<const uint8_t*>(m);
  }
  ::close(fd);  // the mapping keeps the file alive
  static const uint8_t kEmpty[1] = {0};
  Status st_parse = detail::parse_image(im.base ? im.base : kEmpty, im.size, opts, &im.img);
  if (!st_parse.ok()) return st_parse.with_context(path);
  if (opts.populate && im.size > 0) touch_pages(im.base, im.size);
  return f;
}

Result<std::unique_ptr<File>> File::from_memory(std::span<const uint8_t> bytes, const OpenOptions& opts) {
  std::unique_ptr<File> f(new File());
  Impl& im = *f->impl_;
  im.path = "<memory>";
  static const uint8_t kEmpty[1] = {0};
  im.base = bytes.empty() ? kEmpty : bytes.data();
  im.size = bytes.size();
  DS4_RETURN_IF_ERROR(detail::parse_image(im.base, im.size, opts, &im.img));
  return f;
}

uint32_t File::version() const { return impl_->img.version; }
uint64_t File::alignment() const { return impl_->img.alignment; }
uint64_t File::data_offset() const { return impl_->img.data_offset; }
uint64_t File::file_size() const { return impl_->size; }
const std::string& File::path() const { return impl_->path; }
const std::vector<KeyValue>& File::metadata() const { return impl_->img.metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->img.tensors; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->img.key_index.find(key);
  return it == impl_->img.key_index.end() ? nullptr : &impl_->img.metadata[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->img.tensor_index.find(name);
  return it == impl_->img.tensor_index.end() ? nullptr : &impl_->img.tensors[it->second];
}

Tensor File::tensor(const TensorInfo& info) const {
  // Offsets and sizes were checked against the file size when it was opened.
  return Tensor{&info, impl_->base + impl_->img.data_offset + info.offset};
}

namespace {

std::string quoted_key(std::string_view key) {
  std::string out;
  out.reserve(key.size() + 2);
  out += '\'';
  out += key;
  out += '\'';
  return out;
}

Status missing(std::string_view key) { return not_found("gguf: metadata key " + quoted_key(key) + " not found"); }

Status wrong_type(std::string_view key, const Value& v, const char* expected) {
  return invalid_data("gguf: metadata key " + quoted_key(key) + " is " + value_type_name(v.type) + " " +
                      v.to_display(4) + ", expected " + expected);
}

}  // namespace

Result<uint64_t> File::get_u64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto x = v->as_u64();
  if (!x) return wrong_type(key, *v, "a non-negative integer (u8..u64, i8..i64)");
  return *x;
}

Result<int64_t> File::get_i64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto x = v->as_i64();
  if (!x) return wrong_type(key, *v, "an integer that fits in i64");
  return *x;
}

Result<double> File::get_f64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto x = v->as_f64();
  if (!x) return wrong_type(key, *v, "a number (f32/f64, or an integer exactly representable as f64)");
  return *x;
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  auto x = v->as_bool();
  if (!x) return wrong_type(key, *v, "bool");
  return *x;
}

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const std::string* s = v->as_string();
  if (!s) return wrong_type(key, *v, "string");
  return *s;
}

Result<const Array*> File::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  const Array* a = v->as_array();
  if (!a) return wrong_type(key, *v, "array");
  return a;
}

}  // namespace ds4::gguf
