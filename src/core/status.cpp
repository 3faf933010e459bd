// status.cpp — names and formatting for ds4::Status (include/ds4/status.h).
#include "ds4/status.h"

namespace ds4 {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::invalid_data: return "invalid_data";
    case StatusCode::not_found: return "not_found";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::out_of_memory: return "out_of_memory";
    case StatusCode::io_error: return "io_error";
    case StatusCode::cancelled: return "cancelled";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace ds4
