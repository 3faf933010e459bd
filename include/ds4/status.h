// status.h — errors as values for every ds4cpp library.
//
// Library code never exits or throws across its public boundary: it returns a Status
// (or a Result<T> that holds either a T or a Status). Tools turn a failed Status into a
// message on stderr and a non-zero exit; the server turns it into an HTTP 4xx/5xx body.
// Deliberately tiny: no error categories beyond the code enum, no stack of causes —
// the message carries the context ("gguf: tensor 'x' at offset 1234: ...").
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace ds4 {

enum class StatusCode {
  ok = 0,
  invalid_argument,  // caller passed something malformed (bad flag, bad request field)
  invalid_data,      // a file or payload is malformed, truncated or hostile
  not_found,         // a named thing (file, tensor, key, model) does not exist
  unsupported,       // well-formed but outside what we implement (unknown quant type, ...)
  out_of_memory,     // an allocation (host or device) failed or would exceed a limit
  io_error,          // the OS refused a read/write/mmap
  cancelled,         // the caller asked to stop
  unavailable,       // temporarily unable (queue full, device busy)
  internal,          // a bug or a backend failure (e.g. a CUDA error)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_data: gguf: ..." — for logs and CLI messages.
  std::string to_string() const;
  // Prepends context: Status(..., "bad type").with_context("tensor x") -> "tensor x: bad type".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::invalid_argument, std::move(m)}; }
inline Status invalid_data(std::string m) { return {StatusCode::invalid_data, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::not_found, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::unsupported, std::move(m)}; }
inline Status out_of_memory(std::string m) { return {StatusCode::out_of_memory, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::io_error, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::cancelled, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::unavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::internal, std::move(m)}; }

// Result<T>: a T or a failed Status (std::expected is C++23; g++ 12 lacks it).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                   // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ds4

// Error plumbing (the only macros we use): propagate a failed Status / Result.
#define DS4_CONCAT_INNER(a, b) a##b
#define DS4_CONCAT(a, b) DS4_CONCAT_INNER(a, b)
#define DS4_RETURN_IF_ERROR(expr)                 \
  do {                                            \
    ::ds4::Status ds4_status_ = (expr);           \
    if (!ds4_status_.ok()) return ds4_status_;    \
  } while (0)
#define DS4_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
#define DS4_ASSIGN_OR_RETURN(lhs, expr) \
  DS4_ASSIGN_OR_RETURN_IMPL(DS4_CONCAT(ds4_result_, __LINE__), lhs, expr)
