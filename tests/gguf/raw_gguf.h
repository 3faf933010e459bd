// raw_gguf.h — byte-level GGUF builder for tests that need files the Writer refuses to produce
// (bad magic, hostile counts, wrong alignment types, overlapping tensors, ...).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ds4::gguf::testing {

struct Raw {
  std::vector<uint8_t> b;

  template <typename T>
  Raw& put(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Raw& u8(uint8_t x) { return put(x); }
  Raw& u32(uint32_t x) { return put(x); }
  Raw& u64(uint64_t x) { return put(x); }
  Raw& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // A KV record whose value is a u32 (type 4).
  Raw& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Raw& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Raw& pad_to(uint64_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

}  // namespace ds4::gguf::testing
