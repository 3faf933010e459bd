// codec.h — the payload codec hook: a lossless transform applied to the opaque session snapshot
// bytes before they are written and undone after the checksum is verified on load. The codec id is
// stored in each entry header, so entries written with a codec a reader does not have are skipped
// (never deleted: another process may have it). The identity codec (id 0) is built in and is what
// the store uses unless told otherwise; it writes and reads the payload with no extra copy.
// Deliberately not here: knowledge of the snapshot layout. A codec that exploits it (FP8 codes +
// exponents for nope dims, f16 RoPE dims: MODEL.md §10.3) belongs with the runtime, which owns
// that layout; it plugs in through this interface.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ds4/status.h"

namespace ds4::kvstore {

class PayloadCodec {
 public:
  virtual ~PayloadCodec() = default;
  // Stored in the header. 0 is the identity; other ids are assigned by whoever defines the codec.
  virtual uint32_t id() const = 0;
  virtual const char* name() const = 0;
  virtual Result<std::vector<uint8_t>> encode(std::span<const uint8_t> raw) const = 0;
  // Must fill exactly raw_out.size() bytes or fail. `stored` has passed its checksum, but the
  // codec must still treat it as untrusted (a crafted file can carry a valid checksum).
  virtual Status decode(std::span<const uint8_t> stored, std::span<uint8_t> raw_out) const = 0;
};

// The built-in identity codec (id 0).
const PayloadCodec& identity_codec();

}  // namespace ds4::kvstore
