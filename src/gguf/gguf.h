// gguf.h — GGUF v3 container: a bounds-checked mmap reader and a streaming writer.
//
// The reader never trusts the file: every length, count, offset and nesting depth is checked
// against the mapped size before use, and failures are Status values that name the problem and
// the byte offset ("gguf: offset 1234: string length 9e18 exceeds file size"). It allocates
// nothing proportional to a count read from the file before validating that count against the
// bytes that remain. Tensor data is never copied: Tensor::data points into the mapping.
// The writer streams: header and directory first, then tensor payloads one by one through a
// callback, so a 150 GiB file needs only one tensor's worth of memory at a time.
// Deliberately not here: model semantics (src/model), quant block math (src/quant).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ds4/status.h"
#include "quant/types.h"

namespace ds4::gguf {

enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::u8;
  std::vector<Value> items;
};
// One metadata value. Arrays of scalars/strings are materialized (bounded by the file size).
struct Value {
  ValueType type = ValueType::u8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<Array>> v;

  // Numeric accessors: succeed for any integer/float type whose value converts exactly
  // (integers: in range; floats to integers: never). Strings/arrays fail.
  std::optional<uint64_t> as_u64() const;
  std::optional<int64_t> as_i64() const;
  std::optional<double> as_f64() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  const Array* as_array() const;
  std::string to_display(size_t max_items = 8) const;  // for ds4-inspect
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // dims, fastest first (ne[0] contiguous)
  GgmlType type = GgmlType::F32;
  uint32_t type_id = 0;      // raw ggml type id as stored
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_bytes = 0;      // storage size
  uint64_t n_elements() const;
};

struct Tensor {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the File lives
};

struct OpenOptions {
  bool populate = false;  // MAP_POPULATE / touch all pages (ds4 --warm-weights)
};

class File {
 public:
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  static Result<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& opts = {});
  // Parses an in-memory image (no mmap); the buffer must outlive the File. Used by the fuzzer/tests.
  static Result<std::unique_ptr<File>> from_memory(std::span<const uint8_t> bytes);

  uint32_t version() const;
  uint64_t alignment() const;    // general.alignment (u32, non-zero) or 32
  uint64_t data_offset() const;  // absolute offset of the data section
  uint64_t file_size() const;
  const std::string& path() const;

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;  // first match, like ds4
  const std::vector<TensorInfo>& tensors() const;  // in file (directory) order
  const TensorInfo* find_tensor(std::string_view name) const;  // O(1) average
  Tensor tensor(const TensorInfo& info) const;

  // Typed getters with errors that name the key and what was expected.
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<const Array*> get_array(std::string_view key) const;

 private:
  File();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- writer -------------------------------------------------------------------------------

// Directory entry for the writer; payload bytes come later through the callback.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  GgmlType type = GgmlType::F32;
};

// Fills `out` (exactly the tensor's n_bytes) with the payload of tensor `index`. May be called
// from several threads at once for different tensors (the writer decides the parallelism).
using PayloadFn = std::function<Status(size_t index, std::span<uint8_t> out)>;

struct WriteOptions {
  uint64_t alignment = 32;
  int n_threads = 1;  // threads producing payloads concurrently (written in order)
};

class Writer {
 public:
  Writer();
  ~Writer();
  void add(std::string key, Value value);  // metadata, kept in insertion order
  void add_u32(std::string key, uint32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_i32(std::string key, int32_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_array(std::string key, ValueType elem_type, std::vector<Value> items);
  void add_tensor(TensorSpec spec);
  // Writes the whole file (atomically: temp file + rename). Memory use is bounded by
  // n_threads × the largest tensor.
  Status write(const std::string& path, const PayloadFn& payload, const WriteOptions& opts = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::gguf
