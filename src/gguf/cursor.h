// cursor.h — bounds-checked little-endian reads over an untrusted byte image (internal to ds4_gguf).
//
// Every read checks the bytes that remain first and fails with a Status naming the byte offset
// and what was being read, so callers never index past the image. Deliberately no allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "ds4/status.h"

namespace ds4::gguf::detail {

// "gguf: offset 1234: <what>" — the one message shape every parse error uses.
inline Status data_error(uint64_t offset, const std::string& what) {
  return invalid_data("gguf: offset " + std::to_string(offset) + ": " + what);
}

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* base() const { return base_; }

  // Fails unless n more bytes exist; `what` names the field for the message.
  Status need(uint64_t n, std::string_view what) const {
    if (n > remaining()) [[unlikely]]
      return truncated(n, what);
    return Status::Ok();
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    DS4_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, base_ + pos_, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
    pos_ += sizeof(T);
    return Status::Ok();
  }

  // gguf_string: u64 length + bytes. The view points into the image.
  Status read_string(std::string_view* out, std::string_view what) {
    uint64_t start = pos_;
    uint64_t len = 0;
    DS4_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) [[unlikely]]
      return string_too_long(start, len, what);
    *out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::Ok();
  }

 private:
  // Error paths kept out of line so the hot reads stay small enough to inline.
  [[gnu::noinline]] Status truncated(uint64_t n, std::string_view what) const {
    return data_error(pos_, "truncated: " + std::string(what) + " needs " + std::to_string(n) + " bytes, " +
                                std::to_string(remaining()) + " remain");
  }
  [[gnu::noinline]] Status string_too_long(uint64_t start, uint64_t len, std::string_view what) const {
    return data_error(start, std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                                 std::to_string(remaining()) + " bytes that remain in the file");
  }

  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

}  // namespace ds4::gguf::detail
