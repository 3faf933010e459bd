// text_util.cpp — see text_util.h.
#include "server/text_util.h"

#include <algorithm>
#include <random>
#include <utility>

namespace ds4::server {

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

size_t utf8_complete_prefix(std::string_view s) {
  const size_t n = s.size();
  // Look back at most 3 bytes for the start of the last sequence.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

std::string random_id(std::string_view prefix) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;  // the OS entropy source: ids must be unguessable (exact-DSML replay keys)
  std::string out(prefix);
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k) {
      out.push_back(kHex[v & 15]);
      v >>= 4;
    }
  }
  return out;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (hit_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // Earliest complete match wins.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : stops_) {
    size_t p = held_.find(s);
    if (p != std::string::npos && p < best) {
      best = p;
      best_stop = &s;
    }
  }
  if (best_stop) {
    hit_ = true;
    matched_ = *best_stop;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop sequence.
  size_t keep = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (hit_) return {};
  return std::exchange(held_, {});
}

}  // namespace ds4::server
