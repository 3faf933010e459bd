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
//
// Decisions beyond FORMATS.md §1 (the reader is a little stricter than ds4 where ds4 would read
// garbage; a file written by ds4's or ggml's writer with the types of types.h is accepted):
//  * tensor types must be known to src/quant/types.h (else `unsupported`), and ne[0] must be a
//    whole number of blocks (as ggml requires), so n_bytes = n_elements / block_elems * block_bytes;
//  * tensors with non-zero size must not overlap (ds4 never checks; no writer produces it);
//  * a BOOL byte other than 0/1 is invalid_data (the spec calls it invalid; ds4 reads non-zero as true);
//  * general.alignment: honoured only when it is a UINT32 with a non-zero value (exactly as ds4);
//  * bytes after the last tensor (trailing padding) may be missing: only [abs, abs+n_bytes) must fit;
//  * array nesting depth: an array directly inside a KV record is depth 1; depth 9 is rejected;
//  * duplicate keys are kept in metadata() and find() returns the first (ds4's linear scan);
//    duplicate tensor names are invalid_data.
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
// One metadata value. Arrays of scalars/strings are materialized: at most one Value per file
// byte (every count is checked against the bytes left) and at most OpenOptions::max_metadata_bytes.
// Storage: u8..u64 hold uint64_t, i8..i64 int64_t, f32/f64 double (f32 widened exactly), boolean
// bool, string std::string, array a non-null shared_ptr<Array>; the Value::of_* constructors obey it.
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

  // Constructors for building metadata (writer, tests).
  static Value of_u8(uint8_t x);
  static Value of_i8(int8_t x);
  static Value of_u16(uint16_t x);
  static Value of_i16(int16_t x);
  static Value of_u32(uint32_t x);
  static Value of_i32(int32_t x);
  static Value of_u64(uint64_t x);
  static Value of_i64(int64_t x);
  static Value of_f32(float x);
  static Value of_f64(double x);
  static Value of_bool(bool x);
  static Value of_string(std::string x);
  static Value of_array(ValueType elem_type, std::vector<Value> items);
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

// Deep structural equality (same type tags, same values; f32/f64 compared bit-exactly).
bool operator==(const Value& a, const Value& b);

struct Tensor {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the File lives
  std::span<const uint8_t> bytes() const {
    return info ? std::span<const uint8_t>(data, info->n_bytes) : std::span<const uint8_t>();
  }
};

struct OpenOptions {
  bool populate = false;  // MAP_POPULATE / touch all pages (ds4 --warm-weights)
  // Cap on the memory used to materialize metadata values (a hostile file could otherwise turn
  // each byte into a ~48-byte Value). The real files need about 30 MiB.
  uint64_t max_metadata_bytes = uint64_t{1} << 30;
};

class File {
 public:
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  static Result<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& opts = {});
  // Parses an in-memory image (no mmap); the buffer must outlive the File. Used by the fuzzer/tests.
  static Result<std::unique_ptr<File>> from_memory(std::span<const uint8_t> bytes,
                                                   const OpenOptions& opts = {});

  uint32_t version() const;
  uint64_t alignment() const;    // general.alignment (u32, non-zero) or 32
  uint64_t data_offset() const;  // absolute offset of the data section
  uint64_t file_size() const;
  const std::string& path() const;

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;  // first match, like ds4
  const std::vector<TensorInfo>& tensors() const;  // in file (directory) order
  const TensorInfo* find_tensor(std::string_view name) const;  // O(1) average
  Tensor tensor(const TensorInfo& info) const;  // info must come from this File's tensors()

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
// The buffer is zeroed before each call. An empty PayloadFn writes all-zero tensors; written to a
// file they are holes (sparse: FORMATS.md §3.7 full-shape files take no disk space).
using PayloadFn = std::function<Status(size_t index, std::span<uint8_t> out)>;

struct WriteOptions {
  // Multiple of 8, < 2^32. Anything but 32 is recorded as general.alignment (UINT32) unless the
  // metadata already holds that key (it must then be a UINT32 of the same value).
  uint64_t alignment = 32;
  int n_threads = 1;  // threads producing payloads concurrently (written in order)
  // Tensors for which this returns true are written as all zeros without calling the payload: holes
  // in a file (no disk), as an empty PayloadFn does for every tensor. Lets a sparse full-shape file
  // carry a few real tensors (ds4-gen --zeros-except).
  std::function<bool(size_t index)> hole = nullptr;
};

class Writer {
 public:
  Writer();
  ~Writer();
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;
  void add(std::string key, Value value);  // metadata, kept in insertion order
  void add_u32(std::string key, uint32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_i32(std::string key, int32_t v);
  void add_i64(std::string key, int64_t v);
  void add_f64(std::string key, double v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_array(std::string key, ValueType elem_type, std::vector<Value> items);
  void add_tensor(TensorSpec spec);
  // Writes the whole file (atomically: temp file + rename). Memory use is bounded by
  // n_threads × the largest tensor.
  // Errors: invalid_argument (bad metadata/tensor specs), the payload's own Status (with the
  // tensor name prepended), io_error (ENOSPC, EFBIG, ...; the temp file is removed).
  Status write(const std::string& path, const PayloadFn& payload, const WriteOptions& opts = {});
  // The same bytes, in memory (tests, fuzz seeds). Needs the whole file's size in RAM.
  Result<std::vector<uint8_t>> write_to_memory(const PayloadFn& payload,
                                               const WriteOptions& opts = {});
  size_t n_tensors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::gguf
