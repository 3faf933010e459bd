// store_internal.h — pieces shared by store.cpp (save/lookup) and store_admin.cpp (list, verify,
// eviction, gc): file naming and opening an entry file with its header validated.
#pragma once

#include <string>

#include "kvstore/entry_format.h"
#include "kvstore/fs_ops.h"

namespace ds4::kvstore::internal {

enum class FileKind { entry, meta, index, temp, lock, other };
// Classifies a directory entry name; `stem` gets the 64-hex key for entry/meta/index files.
FileKind classify(const std::string& name, std::string* stem);

inline std::string entry_name(const std::string& hex) { return hex + ".kv"; }
inline std::string meta_name(const std::string& hex) { return hex + ".meta"; }
inline std::string index_name(const std::string& hex) { return hex + ".idx"; }
inline constexpr const char* kLockName = ".lock";

struct OpenedEntry {
  Fd fd;
  uint64_t file_bytes = 0;
  uint64_t inode = 0;
  EntryHeader header;
};
// Opens an entry and validates its header against the file size (not the body).
Result<OpenedEntry> open_entry(const std::string& path, const ParseLimits& limits);
// Reads and verifies the body of an opened entry.
Result<Entry> read_entry(const OpenedEntry& e, std::span<const PayloadCodec* const> codecs, const ParseLimits& limits);
// Unlinks `path` only if it is still the file we examined (same inode): a writer may have
// published a fresh entry under the same name since.
void remove_if_same(const std::string& path, uint64_t inode);

}  // namespace ds4::kvstore::internal
