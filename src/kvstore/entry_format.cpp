// entry_format.cpp — encode and validate entry files (layout in entry_format.h).
#include "kvstore/entry_format.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace ds4::kvstore {

static_assert(std::endian::native == std::endian::little, "entry files are little-endian; add byte swaps");

namespace {

constexpr uint8_t kMagic[8] = {'D', 'S', '4', 'K', 'V', 'C', 0, 1};
constexpr size_t kHeaderShaAt = 480;
constexpr size_t kReservedFrom = 312;
// No single section can plausibly exceed this; keeps offset arithmetic far from overflow.
constexpr uint64_t kMaxSectionBytes = uint64_t{1} << 46;

uint64_t align64(uint64_t x) { return (x + 63) & ~uint64_t{63}; }

void put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

const PayloadCodec* find_codec(uint32_t id, std::span<const PayloadCodec* const> codecs) {
  for (const PayloadCodec* c : codecs)
    if (c && c->id() == id) return c;
  return id == 0 ? &identity_codec() : nullptr;
}

// Reads a section in bounded pieces, hashing as it goes, straight into `dst`.
Status read_section(const ReadAt& read, uint64_t off, uint8_t* dst, uint64_t n, const Digest& want,
                    const char* what) {
  Sha256 h;
  constexpr uint64_t kPiece = uint64_t{8} << 20;
  for (uint64_t done = 0; done < n;) {
    const size_t k = static_cast<size_t>(std::min(kPiece, n - done));
    DS4_RETURN_IF_ERROR(read(off + done, dst + done, k));
    h.update(dst + done, k);
    done += k;
  }
  if (h.peek() != want) return invalid_data(std::string("kvstore: ") + what + " checksum mismatch");
  return Status::Ok();
}

Status check_padding(const ReadAt& read, uint64_t from, uint64_t to) {
  if (to <= from) return Status::Ok();
  uint8_t pad[64];
  DS4_RETURN_IF_ERROR(read(from, pad, static_cast<size_t>(to - from)));
  for (uint64_t i = 0; i < to - from; ++i)
    if (pad[i] != 0) return invalid_data("kvstore: non-zero padding between sections");
  return Status::Ok();
}

}  // namespace

EntryLayout layout_of(const EntryHeader& h) {
  EntryLayout l;
  l.text_off = kHeaderBytes;
  l.tokens_off = align64(l.text_off + h.text_bytes);
  l.logits_off = align64(l.tokens_off + h.n_tokens * 4);
  l.payload_off = align64(l.logits_off + h.n_logits * 4);
  l.end = l.payload_off + h.payload_stored_bytes;
  return l;
}

std::array<uint8_t, kHeaderBytes> encode_header(const EntryHeader& h) {
  std::array<uint8_t, kHeaderBytes> b{};
  uint8_t* p = b.data();
  std::memcpy(p, kMagic, 8);
  put32(p + 8, h.format_version);
  put32(p + 12, static_cast<uint32_t>(kHeaderBytes));
  std::memcpy(p + 16, h.engine_version.data(), std::min(h.engine_version.size(), kEngineVersionBytes));
  std::memcpy(p + 48, h.model_fingerprint.data(), 32);
  put32(p + 80, h.quant_family);
  put32(p + 84, static_cast<uint32_t>(h.reason));
  put32(p + 88, h.codec_id);
  put32(p + 92, 0);
  put64(p + 96, h.ctx);
  put64(p + 104, h.n_tokens);
  put64(p + 112, h.text_bytes);
  put64(p + 120, h.n_logits);
  put64(p + 128, h.payload_raw_bytes);
  put64(p + 136, h.payload_stored_bytes);
  put64(p + 144, h.created_unix);
  std::memcpy(p + 152, h.key.data(), 32);
  std::memcpy(p + 184, h.text_sha.data(), 32);
  std::memcpy(p + 216, h.tokens_sha.data(), 32);
  std::memcpy(p + 248, h.logits_sha.data(), 32);
  std::memcpy(p + 280, h.payload_sha.data(), 32);
  Digest d = sha256(p, kHeaderShaAt);
  std::memcpy(p + kHeaderShaAt, d.data(), 32);
  return b;
}

Result<EntryHeader> parse_header(std::span<const uint8_t> bytes, uint64_t file_size, const ParseLimits& limits) {
  if (bytes.size() < kHeaderBytes || file_size < kHeaderBytes)
    return invalid_data("kvstore: file shorter than the " + std::to_string(kHeaderBytes) + "-byte header");
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 8) != 0) return invalid_data("kvstore: bad magic (not a ds4cpp KV cache entry)");
  EntryHeader h;
  h.format_version = get32(p + 8);
  if (h.format_version != kFormatVersion)
    return unsupported("kvstore: entry format version " + std::to_string(h.format_version) + " (this build reads " +
                       std::to_string(kFormatVersion) + ")");
  if (get32(p + 12) != kHeaderBytes) return invalid_data("kvstore: bad header size");
  if (sha256(p, kHeaderShaAt) != *reinterpret_cast<const Digest*>(p + kHeaderShaAt))
    return invalid_data("kvstore: header checksum mismatch");
  for (size_t i = kReservedFrom; i < kHeaderShaAt; ++i)
    if (p[i] != 0) return invalid_data("kvstore: reserved header bytes are not zero");
  if (get32(p + 92) != 0) return invalid_data("kvstore: unknown header flags");
  const char* ev = reinterpret_cast<const char*>(p + 16);
  h.engine_version.assign(ev, strnlen(ev, kEngineVersionBytes));
  for (size_t i = h.engine_version.size(); i < kEngineVersionBytes; ++i)
    if (p[16 + i] != 0) return invalid_data("kvstore: engine version is not NUL padded");
  std::memcpy(h.model_fingerprint.data(), p + 48, 32);
  h.quant_family = get32(p + 80);
  const uint32_t reason = get32(p + 84);
  if (reason > static_cast<uint32_t>(SaveReason::shutdown)) return invalid_data("kvstore: unknown save reason");
  h.reason = static_cast<SaveReason>(reason);
  h.codec_id = get32(p + 88);
  h.ctx = get64(p + 96);
  h.n_tokens = get64(p + 104);
  h.text_bytes = get64(p + 112);
  h.n_logits = get64(p + 120);
  h.payload_raw_bytes = get64(p + 128);
  h.payload_stored_bytes = get64(p + 136);
  h.created_unix = get64(p + 144);
  std::memcpy(h.key.data(), p + 152, 32);
  std::memcpy(h.text_sha.data(), p + 184, 32);
  std::memcpy(h.tokens_sha.data(), p + 216, 32);
  std::memcpy(h.logits_sha.data(), p + 248, 32);
  std::memcpy(h.payload_sha.data(), p + 280, 32);

  if (h.n_tokens == 0 || h.n_tokens > limits.max_tokens)
    return invalid_data("kvstore: token count " + std::to_string(h.n_tokens) + " out of range");
  if (h.n_logits > limits.max_logits) return invalid_data("kvstore: logit count out of range");
  if (h.text_bytes > kMaxSectionBytes || h.payload_stored_bytes > kMaxSectionBytes)
    return invalid_data("kvstore: section length out of range");
  if (h.payload_raw_bytes > limits.max_payload_raw_bytes) return invalid_data("kvstore: payload size out of range");
  if (h.codec_id == 0 && h.payload_raw_bytes != h.payload_stored_bytes)
    return invalid_data("kvstore: identity payload with raw != stored size");
  const EntryLayout l = layout_of(h);
  if (l.end != file_size)
    return invalid_data("kvstore: header describes " + std::to_string(l.end) + " bytes but the file has " +
                        std::to_string(file_size) + " (truncated or padded)");
  return h;
}

Result<Entry> read_entry_body(const EntryHeader& h, const ReadAt& read, std::span<const PayloadCodec* const> codecs,
                              const ParseLimits& limits) {
  const PayloadCodec* codec = find_codec(h.codec_id, codecs);
  if (!codec) return unsupported("kvstore: payload codec id " + std::to_string(h.codec_id) + " is not available");
  const EntryLayout l = layout_of(h);
  Entry e;
  e.header = h;
  // Every allocation below is bounded by the real file size (parse_header checked the layout),
  // except a non-identity codec's raw size, bounded by limits.max_payload_raw_bytes.
  e.text.resize(h.text_bytes);
  DS4_RETURN_IF_ERROR(read_section(read, l.text_off, reinterpret_cast<uint8_t*>(e.text.data()), h.text_bytes,
                                   h.text_sha, "text"));
  DS4_RETURN_IF_ERROR(check_padding(read, l.text_off + h.text_bytes, l.tokens_off));
  e.tokens.resize(h.n_tokens);
  DS4_RETURN_IF_ERROR(read_section(read, l.tokens_off, reinterpret_cast<uint8_t*>(e.tokens.data()),
                                   h.n_tokens * 4, h.tokens_sha, "tokens"));
  DS4_RETURN_IF_ERROR(check_padding(read, l.tokens_off + h.n_tokens * 4, l.logits_off));
  e.logits.resize(h.n_logits);
  DS4_RETURN_IF_ERROR(read_section(read, l.logits_off, reinterpret_cast<uint8_t*>(e.logits.data()),
                                   h.n_logits * 4, h.logits_sha, "logits"));
  DS4_RETURN_IF_ERROR(check_padding(read, l.logits_off + h.n_logits * 4, l.payload_off));
  if (codec->id() == 0) {
    e.payload.resize(h.payload_stored_bytes);
    DS4_RETURN_IF_ERROR(read_section(read, l.payload_off, e.payload.data(), h.payload_stored_bytes, h.payload_sha,
                                     "payload"));
  } else {
    std::vector<uint8_t> stored(h.payload_stored_bytes);
    DS4_RETURN_IF_ERROR(
        read_section(read, l.payload_off, stored.data(), h.payload_stored_bytes, h.payload_sha, "payload"));
    e.payload.resize(h.payload_raw_bytes);
    Status st = codec->decode(stored, e.payload);
    if (!st.ok()) return invalid_data("kvstore: payload codec '" + std::string(codec->name()) + "': " + st.message());
  }
  return e;
}

Result<Entry> parse_entry(std::span<const uint8_t> image, std::span<const PayloadCodec* const> codecs,
                          const ParseLimits& limits) {
  DS4_ASSIGN_OR_RETURN(EntryHeader h, parse_header(image, image.size(), limits));
  ReadAt read = [&](uint64_t off, void* dst, size_t n) -> Status {
    if (off > image.size() || n > image.size() - off) return invalid_data("kvstore: read past the end of the entry");
    if (n) std::memcpy(dst, image.data() + off, n);
    return Status::Ok();
  };
  return read_entry_body(h, read, codecs, limits);
}

void fill_section_digests(EntryHeader& h, std::string_view text, std::span<const int32_t> tokens,
                          std::span<const float> logits, std::span<const uint8_t> stored_payload,
                          uint64_t payload_raw_bytes) {
  h.text_bytes = text.size();
  h.n_tokens = tokens.size();
  h.n_logits = logits.size();
  h.payload_stored_bytes = stored_payload.size();
  h.payload_raw_bytes = payload_raw_bytes;
  h.text_sha = sha256(text.data(), text.size());
  h.tokens_sha = sha256(tokens.data(), tokens.size_bytes());
  h.logits_sha = sha256(logits.data(), logits.size_bytes());
  h.payload_sha = sha256(stored_payload);
}

std::vector<uint8_t> build_entry_image(EntryHeader h, std::string_view text, std::span<const int32_t> tokens,
                                       std::span<const float> logits, std::span<const uint8_t> stored_payload,
                                       uint64_t payload_raw_bytes) {
  fill_section_digests(h, text, tokens, logits, stored_payload, payload_raw_bytes);
  const EntryLayout l = layout_of(h);
  std::vector<uint8_t> img(l.end, 0);
  auto hdr = encode_header(h);
  std::memcpy(img.data(), hdr.data(), hdr.size());
  if (!text.empty()) std::memcpy(img.data() + l.text_off, text.data(), text.size());
  if (!tokens.empty()) std::memcpy(img.data() + l.tokens_off, tokens.data(), tokens.size_bytes());
  if (!logits.empty()) std::memcpy(img.data() + l.logits_off, logits.data(), logits.size_bytes());
  if (!stored_payload.empty()) std::memcpy(img.data() + l.payload_off, stored_payload.data(), stored_payload.size());
  return img;
}

}  // namespace ds4::kvstore
