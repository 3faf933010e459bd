// backend.h — the backend interface: the ops the DeepSeek V4 forward pass (src/model) is written
// against, once. A backend object owns its threads/streams and its buffers; every op takes a small
// params struct of raw pointers (backend-accessible memory) plus sizes, and a batch of tokens.
//
// Header-only on purpose: src/model includes it without linking any backend; ds4_backend_cpu (the
// readable reference, src/backend/cpu) and later ds4_backend_cuda implement it. Ops are
// framework-free (pointers + sizes), so a CUDA kernel can be checked against the CPU op one by one.
// Deliberately not here: model structure (which op runs when), session bookkeeping, file formats.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ds4/memory.h"
#include "ds4/status.h"
#include "quant/types.h"

namespace ds4::backend {

// A weight matrix `[rows][cols]` (PyTorch [out][in]) stored row-major in ggml blocks: row `r` is the
// `row_bytes` bytes at `data + r·row_bytes` (MODEL.md §0: GGUF [ne0=cols, ne1=rows]).
struct Weight {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;  // backend-accessible (host mmap on CPU, device copy on CUDA)
  int64_t rows = 0, cols = 0;
  uint64_t row_bytes = 0;

  bool empty() const { return data == nullptr; }
  // Rows [first, first+count) as a matrix of their own (grouped output, one expert of a 3-D tensor).
  Weight row_slice(int64_t first, int64_t count) const {
    Weight w = *this;
    w.data = static_cast<const uint8_t*>(data) + static_cast<uint64_t>(first) * row_bytes;
    w.rows = count;
    return w;
  }
};

// A 3-D expert tensor: expert `e` is the matrix `[rows][cols]` at `data + e·expert_bytes`.
struct ExpertWeights {
  Weight first;               // expert 0
  uint64_t expert_bytes = 0;  // = rows · row_bytes
  int32_t n_expert = 0;
  Weight expert(int32_t e) const {
    Weight w = first;
    w.data = static_cast<const uint8_t*>(first.data) + static_cast<uint64_t>(e) * expert_bytes;
    return w;
  }
};

// How a matmul rounds (MODEL.md §12). `ds4` = ds4's CPU kernels: F16 rows with float accumulation,
// Q8_0 rows against int8 Q8_0-quantized activations, k-quant/IQ rows against Q8_K activations, F32 rows
// with double accumulation. `exact` = dequantize to float, accumulate in double, no activation
// quantization (HF-compatibility / golden tests).
enum class MatmulNumerics { ds4, exact };

// y[i][o] = Σ_c W[o][c] · x[i][c] for i < n (y overwritten). Strides are in floats.
struct MatmulArgs {
  Weight w;
  const float* x = nullptr;  // [n][x_stride], the first w.cols values of each row are read
  int64_t x_stride = 0;
  float* y = nullptr;        // [n][y_stride], the first w.rows values of each row are written
  int64_t y_stride = 0;
  int64_t n = 0;
  MatmulNumerics numerics = MatmulNumerics::ds4;
  // Grouped (block-diagonal) form, MODEL.md §7.7's output projection (8 groups of o_lora_rank rows, each
  // over its own w.cols inputs): with group_rows > 0, output row o of token i reads the w.cols values at
  // x + i·x_stride + (o / group_rows)·group_x_stride. The same numbers as one call per row slice
  // (Weight::row_slice) with its own x offset; one call lets a backend read every group in one pass.
  int64_t group_rows = 0;
  int64_t group_x_stride = 0;
};

// The grouped form as what it means: fn(slice) for each row group g, a plain (group_rows = 0) job over
// W's rows [g·group_rows, …) with its own inputs x + g·group_x_stride, writing y from row g·group_rows.
// For a backend (or a path) without a one-pass grouped kernel. Job: MatmulArgs or a backend's own job
// struct with the same w / x / y / group_rows / group_x_stride fields.
template <class Job, class Fn>
void for_each_row_group(const Job& j, Fn&& fn) {
  for (int64_t r0 = 0, g = 0; r0 < j.w.rows; r0 += j.group_rows, ++g) {
    Job s = j;
    s.group_rows = 0;
    s.w = j.w.row_slice(r0, std::min(j.group_rows, j.w.rows - r0));
    s.x = j.x + g * j.group_x_stride;
    s.y = j.y + r0;
    fn(s);
  }
}

// y = x / sqrt(mean(x²) + eps) (⊙ w when w != nullptr), per row; x and y may alias.
struct RmsNormArgs {
  const float* x = nullptr;  // [rows][stride]
  float* y = nullptr;        // [rows][stride]
  const float* w = nullptr;  // [dim] or nullptr (unweighted)
  int64_t rows = 0, dim = 0, stride = 0;
  float eps = 1e-6f;
};

// Partial tail RoPE with adjacent pairs (MODEL.md §5.3) on the last `n_rot` dims of each head, in place.
struct RopeArgs {
  float* x = nullptr;           // [n][heads][head_dim] (token stride = heads·head_dim)
  const int32_t* pos = nullptr; // [n] position of each token
  int64_t n = 0;
  int32_t heads = 1, head_dim = 0, n_rot = 0;
  const double* freq = nullptr; // [n_rot/2] inverse frequencies ω_i of this layer (host memory)
  bool inverse = false;         // rotate by −θ (attention output, §7.7)
};

// HC control split + Sinkhorn (MODEL.md §6.2 steps 3-4), per token.
struct HcSplitArgs {
  const float* m = nullptr;      // [n][(2+nhc)·nhc] raw controls Wfn·RMSNorm(flat(X))
  const float* scale = nullptr;  // [3] (pre, post, comb)
  const float* base = nullptr;   // [(2+nhc)·nhc]
  int64_t n = 0;
  int32_t nhc = 4, iters = 20;
  float eps = 1e-6f;
  float* pre = nullptr;   // [n][nhc]
  float* post = nullptr;  // [n][nhc]
  float* comb = nullptr;  // [n][nhc][nhc], C[j][k] at j·nhc + k (j = source stream, k = output stream)
};

// Output-head weights w_s = σ(m[s]·scale + base[s]) + eps (MODEL.md §6.3).
struct HcHeadArgs {
  const float* m = nullptr;     // [n][nhc]
  const float* scale = nullptr; // [1]
  const float* base = nullptr;  // [nhc]
  int64_t n = 0;
  int32_t nhc = 4;
  float eps = 1e-6f;
  float* w = nullptr;           // [n][nhc]
};

// y[i] = Σ_s w[i][s] · X[i][s]  (HC collapse).
struct HcCollapseArgs {
  const float* x = nullptr;  // [n][nhc][dim]
  const float* w = nullptr;  // [n][nhc]
  float* y = nullptr;        // [n][dim]
  int64_t n = 0, dim = 0;
  int32_t nhc = 4;
};

// X'[i][k] = post[i][k]·f[i] + Σ_j C[i][j][k]·X[i][j]  (MODEL.md §6.2 "Post"). out must not alias x.
// With f_add, f[i] + f_add[i] (one float add, as `add` would leave it in f) takes the place of f[i]:
// the FFN's routed + shared expert sum fused into the post (f itself is not written).
struct HcPostArgs {
  const float* x = nullptr;     // [n][nhc][dim]
  const float* f = nullptr;     // [n][dim]
  const float* post = nullptr;  // [n][nhc]
  const float* comb = nullptr;  // [n][nhc][nhc]
  float* out = nullptr;         // [n][nhc][dim]
  int64_t n = 0, dim = 0;
  int32_t nhc = 4;
  const float* f_add = nullptr; // [n][dim] or null
};

// HC "Pre" of a sublayer (MODEL.md §6.2) as one op, the pieces in this order: flat = RMSNorm(X)
// (unweighted, over nhc·dim), mix = fn·flat (a matmul under `numerics`), split + Sinkhorn → pre, post,
// comb, y = Σ_s pre[s]·X[s] (collapse), xn = RMSNorm_norm_w(y). A fused backend gives the same bits as
// its own pieces; flat and y are scratch it may leave unwritten.
struct HcPreArgs {
  const float* x = nullptr;       // [n][nhc][dim] HC state
  Weight fn;                      // [(2+nhc)·nhc][nhc·dim] control weights (F16 in the GGUF)
  const float* scale = nullptr;   // [3]
  const float* base = nullptr;    // [(2+nhc)·nhc]
  const float* norm_w = nullptr;  // [dim] sublayer norm
  int64_t n = 0, dim = 0;
  int32_t nhc = 4, iters = 20;
  float hc_eps = 1e-6f, rms_eps = 1e-6f;
  MatmulNumerics numerics = MatmulNumerics::ds4;
  float* flat = nullptr;          // [n][nhc·dim] scratch
  float* mix = nullptr;           // [n][(2+nhc)·nhc]
  float* pre = nullptr;           // [n][nhc]
  float* post = nullptr;          // [n][nhc]
  float* comb = nullptr;          // [n][nhc][nhc]
  float* y = nullptr;             // [n][dim] scratch
  float* xn = nullptr;            // [n][dim] sublayer input
  // false: the caller runs hc_split on mix itself afterwards (e.g. on a concurrent branch: nothing reads
  // post and comb before the sublayer's HC post), so the op may leave post and comb unwritten (a backend
  // may still write them: the same values); mix, pre, y and xn are written either way.
  bool split = true;
  // The previous sublayer's HC post folded into the op: with prev_post.n > 0 the op first does what
  // hc_post(prev_post) does (prev_post.out must be x: the new state is this pre's input and is written there),
  // so a backend may form the new state where the pre reads it instead of in a launch of its own. n = 0: none.
  HcPostArgs prev_post;
};

// Per row of x [n][heads][head_dim] (token t, head h), in this order: RMSNorm over head_dim (⊙ w when
// set), tail RoPE at pos[t] (RopeArgs), FP8 round trip of the first fp8_quant dims (0: none), IEEE
// half rounding (f16), then, with a ring, a copy of token t's heads·head_dim values to ring row
// pos[t] mod ring_cap of ring_at[t] (or of `ring` when ring_at is null). Tokens that share a ring must
// land on distinct rows (a session's consecutive positions, at most ring_cap of them: the forward pass's
// raw rings); which one wins a shared row is unspecified. The q/kv path of an attention layer and a
// compressor's emitted rows, one launch instead of up to six.
struct NormRopeArgs {
  float* x = nullptr;              // [n][heads][head_dim], in place
  const int32_t* pos = nullptr;    // [n]
  int64_t n = 0;
  int32_t heads = 1, head_dim = 0, n_rot = 0;
  const float* w = nullptr;        // [head_dim] or null (unweighted)
  float eps = 1e-6f;
  const double* freq = nullptr;    // [n_rot/2] (host memory, as RopeArgs::freq)
  int32_t fp8_quant = 0;           // multiple of 64, ≤ head_dim − n_rot
  bool f16 = false;
  float* ring = nullptr;           // [ring_cap][heads·head_dim] or null: no copy
  float* const* ring_at = nullptr; // [n] per-token ring bases (backend memory), or null: `ring`
  int64_t ring_cap = 0;
  // Rows addressed and counted on the device (a recorded step's emitted compressed rows): token t's
  // [heads][head_dim] rows start at x_at[t] instead of x + t·heads·head_dim, and tokens t ≥ *count are
  // left alone (n is then only a bound). Both backend memory; null: x and all n tokens.
  float* const* x_at = nullptr;    // [n]
  const int32_t* count = nullptr;  // [1], ≤ n
};

// Rows of the embedding table broadcast to all HC streams (MODEL.md §6.1).
struct EmbedArgs {
  Weight table;                    // [vocab][dim]
  const int32_t* tokens = nullptr; // [n] (checked < vocab by the caller)
  int64_t n = 0;
  int32_t nhc = 4;
  float* out = nullptr;            // [n][nhc][dim]
};

// FP8 E4M3 round trip of the first `n_quant` dims of each row, blocks of 64 (MODEL.md §5.4).
struct Fp8RoundArgs {
  float* x = nullptr;  // [rows][stride]
  int64_t rows = 0, stride = 0;
  int32_t n_quant = 0; // multiple of 64
};

// Hadamard (size `dim`, scaled) + FP4 E2M1 round trip in blocks of 32, per row (MODEL.md §5.5).
struct IndexerQatArgs {
  float* x = nullptr;  // [rows][dim]
  int64_t rows = 0;
  int32_t dim = 0;     // power of two, multiple of 32
  bool f16 = false;    // then round each result through IEEE half (the cached rows' §5.6 rounding)
  // As NormRopeArgs::x_at / count: row r at x_at[r], rows r ≥ *count left alone (backend memory).
  float* const* x_at = nullptr;    // [rows]
  const int32_t* count = nullptr;  // [1], ≤ rows
  // n_rot > 0: each row is first rotated as rope() rotates it (RopeArgs, not inverse: row r is head
  // r mod heads of token r / heads at pos[r / heads], its last n_rot dims) — the indexer query's RoPE and
  // QAT as one op (the pieces: rope, then this op without n_rot). Not with x_at or count.
  const int32_t* pos = nullptr;    // [rows / heads] (backend memory)
  int32_t heads = 1, n_rot = 0;
  const double* freq = nullptr;    // [n_rot/2] (host memory, as RopeArgs::freq)
  // With scale_x (and n_rot > 0): also scale(scale_x, scale, scale_count) — the indexer's head weights,
  // independent of the rows — in the same op (the pieces: rope, this op alone, then scale).
  float* scale_x = nullptr;        // [scale_count]
  float scale = 1.0f;
  int64_t scale_count = 0;
};

// One stateful step of a compressor (MODEL.md §7.4, §10.2) over `n` consecutive tokens: writes each
// token's (kv, score + ape[t mod ratio]) into the frontier and, at every block boundary, pools one row.
// Frontier layout: a ring of `slots` rows (a multiple of ratio, at least 2·ratio with overlap) of
// `width = (overlap ? 2 : 1)·out_dim`; token t lives in row t mod slots, so block B occupies the
// contiguous rows starting at (B·ratio) mod slots. Rows beyond what pooling needs let a session
// rewind a few tokens without recomputing (the tokens' inputs are still there).
// One session's share of a batched compressor call (CompressorArgs::seg): its tokens are columns
// col … col+n−1 of kv/score at positions pos0 … pos0+n−1; its own frontier ring and output rows.
struct CompressorSegment {
  int64_t col = 0, n = 0;
  int32_t pos0 = 0;
  float* state_kv = nullptr;     // [slots][width]
  float* state_score = nullptr;  // [slots][width]
  float* out = nullptr;          // [its emitted][out_dim]
  int32_t* out_pos = nullptr;    // [its emitted]
};

struct CompressorArgs {
  const float* kv = nullptr;     // [n][width]  W_kv·x
  const float* score = nullptr;  // [n][width]  W_gate·x (ape added here)
  const float* ape = nullptr;    // [ratio][width]
  int64_t n = 0;
  int32_t pos0 = 0;              // position of the first token (tokens are pos0 … pos0+n−1)
  int32_t ratio = 0, out_dim = 0;
  bool overlap = false;          // ratio-4 two-series pooling
  int32_t slots = 0;             // frontier ring rows
  float* state_kv = nullptr;     // [slots][width] session frontier, updated in place
  float* state_score = nullptr;  // [slots][width]
  float* out = nullptr;          // [max emitted][out_dim] pooled rows, in block order
  int32_t* out_pos = nullptr;    // [max emitted] RoPE position = first token of the block
  int64_t* n_out = nullptr;      // number of rows written
  // Several sessions in one call (a batched step): when segments > 0, each entry of `seg` (backend
  // memory) supplies pos0, n, the frontier and the outputs of one session (those fields above are
  // ignored, and n_out is not written: each session emits ⌊(pos0+n)/r⌋ − ⌊pos0/r⌋ rows). All sessions
  // share ratio, out_dim, overlap, slots and ape.
  int32_t segments = 0;
  const CompressorSegment* seg = nullptr;
};

// Attention with sinks over the raw window and compressed rows (MODEL.md §7.3, §7.6).
struct AttentionArgs {
  const float* q = nullptr;        // [n][heads][head_dim]
  const int32_t* pos = nullptr;    // [n] query positions
  int64_t n = 0;
  int32_t heads = 0, head_dim = 0;
  float scale = 0;                 // 1/sqrt(head_dim)
  const float* sinks = nullptr;    // [heads]
  const float* raw = nullptr;      // ring [raw_cap][head_dim]: position p lives at row p mod raw_cap
  int64_t raw_cap = 0;
  int32_t window = 0;              // query t sees raw positions max(0, t−window+1) … t
  const float* comp = nullptr;     // [*][head_dim] compressed rows (may be null when none)
  const int32_t* comp_count = nullptr; // [n] visible compressed rows per query (null: none)
  const int32_t* comp_idx = nullptr;   // [n][comp_idx_stride] row ids, or null: rows 0…count−1
  int64_t comp_idx_stride = 0;
  float* out = nullptr;            // [n][heads][head_dim]
  // Several sessions in one call (a batched step): per-query ring and compressed-row bases, arrays of
  // n pointers in backend memory; when set they replace `raw` / `comp` for query i (all rings share
  // raw_cap). Null: every query reads `raw` / `comp`.
  const float* const* raw_at = nullptr;   // [n]
  const float* const* comp_at = nullptr;  // [n]
  int64_t max_comp = 0;            // host: an upper bound of every comp_count[i] (0: unknown); a device
                                   // backend sizes per-call scratch by it, nothing is read back
  // §7.7's inverse RoPE of the output folded into the op: with out_rot > 0 the op ends as the call
  // rope({out, pos, n, heads, head_dim, out_rot, out_freq, inverse = true}) would (the same values), so a
  // backend may rotate each output row before storing it instead of launching a pass over it. 0: none.
  int32_t out_rot = 0;
  const double* out_freq = nullptr;  // [out_rot/2] host memory, as RopeArgs::freq
};

// Lightning-indexer selection (MODEL.md §7.5): per query, the top_k of its visible rows by
// score[c] = Σ_h w[h]·max(0, q_h·k_c); exact ties go to the lower row id. With ≤ top_k visible rows,
// all of them are selected (no scoring).
struct IndexerArgs {
  const float* q = nullptr;        // [n][heads][head_dim]
  const float* w = nullptr;        // [n][heads] head weights (already scaled)
  const float* rows = nullptr;     // [*][head_dim] indexer rows
  const int32_t* n_rows = nullptr; // [n] rows visible to each query (prefix)
  int64_t n = 0;
  int32_t heads = 0, head_dim = 0, top_k = 0;
  int32_t* idx = nullptr;          // [n][top_k] selected row ids (ascending)
  int32_t* count = nullptr;        // [n] number selected = min(n_rows, top_k)
  const float* const* rows_at = nullptr;  // [n] per-query indexer rows (backend memory), or null: `rows`
  int64_t max_rows = 0;            // host: an upper bound of every n_rows[i] (0: unknown; a device
                                   // backend then reads n_rows back, a synchronization)
};

// MoE router (MODEL.md §8 steps 1-4): p = sqrt(softplus(z)); selection by hash table or top-k of p+bias;
// weights = scale · p_sel / max(Σ p_sel, denom_guard).
struct RouterArgs {
  const float* logits = nullptr;   // [n][n_expert]
  const float* bias = nullptr;     // [n_expert] selection-only bias, or null
  const int32_t* hash = nullptr;   // tid2eid [vocab][k] (backend memory), or null for top-k routing
  int32_t vocab = 0;
  const int32_t* tokens = nullptr; // [n] input token of each column (hash routing)
  int64_t n = 0;
  int32_t n_expert = 0, k = 0;
  float scale = 1.5f;
  float denom_guard = 0;           // ds4: 2^-14; HF: 1e-20
  int32_t* ids = nullptr;          // [n][k]
  float* weights = nullptr;        // [n][k]
};

// Routed experts: out[i] = Σ_j weights[i][j] · down_e(swiglu(gate_e·x_i, up_e·x_i)), e = ids[i][j].
// SwiGLU clamp (MODEL.md §8 step 5): gate ≤ clamp, −clamp ≤ up ≤ clamp.
struct MoeArgs {
  ExpertWeights gate, up, down;  // gate/up experts [ff][dim], down experts [dim][ff]
  const float* x = nullptr;      // [n][dim]
  const int32_t* ids = nullptr;  // [n][k]
  const float* weights = nullptr;// [n][k]
  int64_t n = 0;
  int32_t k = 0, dim = 0, ff = 0;
  float clamp = 0;               // <= 0: no clamp
  MatmulNumerics numerics = MatmulNumerics::ds4;
  float* out = nullptr;          // [n][dim] (overwritten)
};

// h = silu(min(g, clamp)) · clamp(u, ±clamp) (clamp <= 0: none).
struct SwigluArgs {
  const float* g = nullptr;  // [count]
  const float* u = nullptr;  // [count]
  float* h = nullptr;        // [count]
  int64_t count = 0;
  float clamp = 0;
};

// Greedy choice per row on the device (the head's logits → next token ids, so a greedy decode step hands
// back 4 bytes per session instead of its [V] logits). out[r] = the id of row r's largest value, the lowest
// id on ties, never `excluded` (−1: no id excluded; ds4-bench excludes EOS). NaN policy = ds4::argmax's
// left-to-right scan (best = the first candidate, replaced only by a strictly larger value): a NaN is never
// chosen, except when it sits at the row's first candidate id, which is then the answer. −1 when the row
// has no candidate (n = 0, or n = 1 and that id excluded).
struct ArgmaxArgs {
  const float* x = nullptr;  // [rows][n]
  int64_t rows = 0, n = 0;
  int32_t excluded = -1;
  int32_t* out = nullptr;    // [rows] i32 (backend memory)
};

class Backend;

// Address space reserved once for `reserved` bytes, of which the first `committed` bytes are backed by
// memory and counted under `category`. Growing or shrinking never moves data(), so rows stay contiguous
// and pointers handed to ops stay valid: session KV grows with the tokens it holds (in the backend's
// block size) instead of being allocated for the whole context limit up front. Committed bytes beyond
// those ever written read as zero on the CPU and are unspecified on CUDA.
class Region {
 public:
  // Set by the owning backend only.
  struct Parts {
    void* base = nullptr;
    uint64_t reserved = 0, committed = 0;
    std::vector<uint64_t> handles;  // CUDA: one physical allocation per committed block
  };
  Region() = default;
  Region(Backend* owner, MemCategory cat, Parts p) : owner_(owner), cat_(cat), p_(std::move(p)) {}
  Region(Region&& o) noexcept { *this = std::move(o); }
  Region& operator=(Region&& o) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  void* data() const { return p_.base; }
  float* f32() const { return static_cast<float*>(p_.base); }
  uint64_t committed() const { return p_.committed; }
  uint64_t reserved() const { return p_.reserved; }
  MemCategory category() const { return cat_; }
  bool empty() const { return owner_ == nullptr; }
  Parts& parts() { return p_; }

 private:
  Backend* owner_ = nullptr;
  MemCategory cat_ = MemCategory::other;
  Parts p_;
};

// Move-only owner of one backend allocation; freed (and un-counted) on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* ptr, uint64_t bytes, MemCategory cat)
      : owner_(owner), ptr_(ptr), bytes_(bytes), cat_(cat) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  uint64_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  Backend* owner_ = nullptr;
  void* ptr_ = nullptr;
  uint64_t bytes_ = 0;
  MemCategory cat_ = MemCategory::other;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual bool host_memory() const = 0;  // true: buffers/weights are plain host pointers

  // ---- memory (counted by category where allocated) ----
  virtual Result<Buffer> alloc(uint64_t bytes, MemCategory cat) = 0;  // zero-filled
  virtual void release(void* ptr, uint64_t bytes, MemCategory cat) = 0;  // called by ~Buffer
  // Makes host weight bytes (e.g. an mmap'd GGUF tensor) readable by ops; CPU returns `host` itself.
  virtual Result<const void*> map_weight(const void* host, uint64_t bytes) = 0;
  virtual MemBytes allocated() const = 0;  // counted bytes by category (buffers, committed regions, scratch)
  // Growable memory (Region above). reserve_region takes address space only (nothing is counted);
  // resize_region sets committed = round_up(bytes, region_block_bytes()) (≤ reserved), keeping the
  // contents of the bytes that stay; release_region is called by ~Region.
  virtual uint64_t region_block_bytes() const = 0;
  virtual Result<Region> reserve_region(uint64_t max_bytes, MemCategory cat) = 0;
  virtual Status resize_region(Region& r, uint64_t bytes) = 0;
  virtual void release_region(Region& r) = 0;
  virtual void upload(void* dst, const void* host_src, uint64_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, uint64_t bytes) = 0;
  virtual void copy(void* dst, const void* src, uint64_t bytes) = 0;
  virtual void fill_f32(float* dst, float value, int64_t count) = 0;
  virtual Status sync() = 0;  // waits for queued work; reports asynchronous failures

  // ---- device timestamps (optional; CUDA events; benchmarks only) ----
  // time_mark(slot) records when the main lane reaches this point of its queued work (slot < 4);
  // after sync(), time_ms(a, b) is the device time from mark a to mark b in ms, or −1 when unknown
  // (the default, and the CPU, which runs each op before returning: host clocks measure it).
  virtual void time_mark(int slot) { (void)slot; }
  virtual double time_ms(int from, int to) {
    (void)from;
    (void)to;
    return -1;
  }

  // ---- read-back behind later work (optional; a page-locked slot and an event on CUDA) ----
  // read_back_start(slot, src, bytes) queues a copy of `bytes` (≤ kReadBackBytes) of backend memory into
  // read-back slot `slot` (< kReadBackSlots) after the work enqueued so far; read_back_wait(slot, dst, bytes)
  // waits for that copy alone — not for work enqueued after it — copies it to dst and reports asynchronous
  // failures as sync() does. Pipelined greedy decoding reads step k's token while step k+1 runs. The
  // default downloads at start (waiting for everything queued) and copies at wait.
  static constexpr int kReadBackSlots = 2;
  static constexpr uint64_t kReadBackBytes = 256;
  virtual void read_back_start(int slot, const void* src, uint64_t bytes) {
    if (slot >= 0 && slot < kReadBackSlots && bytes <= kReadBackBytes) download(read_back_[slot], src, bytes);
  }
  virtual Status read_back_wait(int slot, void* dst, uint64_t bytes) {
    if (slot < 0 || slot >= kReadBackSlots || bytes > kReadBackBytes)
      return invalid_argument("backend: read-back slot " + std::to_string(slot) + " of " + std::to_string(bytes) +
                              " bytes is out of range");
    std::memcpy(dst, read_back_[slot], bytes);
    return sync();
  }

  // ---- step graphs (optional; CUDA graphs on the CUDA backend) ----
  // A caller brackets a run of ops whose every argument (sizes, pointers, host bounds) is determined by
  // `key` — per-step values travel through device memory the ops read (step inputs uploaded before
  // graph_begin), never by value — so the recorded work can be replayed for any later run with that key:
  //   switch (be.graph_begin(key)) { replayed: skip the ops; recording / eager: enqueue them, then
  //   if (!be.graph_end()) enqueue them again (the recording was discarded before anything ran) }
  // No transfers from or to host memory, syncs or host reads of device data between the two calls.
  // Errors of a recorded run are reported by sync(), as for eager ops. The default records nothing.
  enum class GraphMode { eager, recording, replayed };
  virtual GraphMode graph_begin(std::span<const int64_t> key) {
    (void)key;
    return GraphMode::eager;
  }
  // After graph_begin returned recording or eager: ends the recording, then instantiates, caches and
  // launches the graph. True when the ops ran or were launched; false when the recording was discarded
  // (something in it cannot be recorded, e.g. scratch had to grow): then nothing of it ran.
  virtual bool graph_end() { return true; }
  // After graph_begin returned recording or eager, when the caller stopped enqueueing half-way (an
  // error): a recording is discarded unlaunched (its key is not recorded again); eager ops already ran.
  virtual void graph_cancel() {}
  // Owners of keys: a caller whose keys hold addresses of its own memory (a Forward's scratch) takes an id
  // here, puts it first in every key, and calls graph_release(id) before that memory goes. Ids are never
  // reused by one backend, so a later caller whose memory lands at the same addresses never replays an
  // earlier one's graphs; release drops them at once instead of leaving them to age out.
  virtual int64_t graph_owner() { return ++graph_owners_; }
  virtual void graph_release(int64_t owner) { (void)owner; }

  // ---- concurrent branches (optional; a second CUDA stream on the CUDA backend) ----
  // A step may run two independent runs of ops side by side: fork() starts the side lane after
  // everything enqueued so far (on the main lane) and sends the ops that follow to it; resume_main()
  // sends the ops that follow back to the main lane, which does not wait for the side lane; join()
  // makes the main lane wait for all the side lane's work and continues on the main lane. fork() again
  // before join() puts the side lane behind the main lane's work so far as well as its own.
  // The caller guarantees the lanes touch disjoint memory between fork and join (no op on one lane
  // reads what the other writes); a backend keeps its own per-op scratch apart per lane. Recorded into a
  // step graph as parallel branches; the ops themselves, and so the numbers, are the same as in order.
  // Transfers, sync() and graph_end() come only after join() (they join first where they can).
  // The default runs everything in order on one lane.
  virtual void fork() {}
  virtual void resume_main() {}
  virtual void join() {}

  // ---- cache hint (optional) ----
  // The weights in `ws` will be read soon: a backend may start pulling their bytes into a cache now, on
  // the current lane, without waiting for them (CUDA: into L2, l2_prefetch.cu). Reads nothing back and
  // writes nothing: no effect on any result. The default does nothing.
  virtual void prefetch(std::span<const Weight> ws) { (void)ws; }

  // ---- ops (all take a batch of n tokens) ----
  virtual void matmul(const MatmulArgs& a) = 0;
  // Independent matmuls in one call (no job reads another's output): the same numbers as one matmul()
  // per job. A backend may run them in one pass (CUDA: a CSA layer's F16 compressor and indexer
  // projections in one launch); the default calls matmul() for each.
  virtual void matmul_many(std::span<const MatmulArgs> jobs) {
    for (const MatmulArgs& j : jobs) matmul(j);
  }
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void embed(const EmbedArgs& a) = 0;
  virtual void hc_split(const HcSplitArgs& a) = 0;
  virtual void hc_head(const HcHeadArgs& a) = 0;
  virtual void hc_collapse(const HcCollapseArgs& a) = 0;
  virtual void hc_post(const HcPostArgs& a) = 0;
  virtual void hc_pre(const HcPreArgs& a) = 0;        // fused: see HcPreArgs
  virtual void norm_rope(const NormRopeArgs& a) = 0;  // fused: see NormRopeArgs
  virtual void fp8_round(const Fp8RoundArgs& a) = 0;
  virtual void indexer_qat(const IndexerQatArgs& a) = 0;
  virtual void f16_round(float* x, int64_t count) = 0;  // round each value through IEEE half
  virtual void add(float* y, const float* x, int64_t count) = 0;  // y += x
  virtual void scale(float* y, float s, int64_t count) = 0;       // y *= s
  virtual void compressor(const CompressorArgs& a) = 0;
  // Independent compressors in one call (a CSA layer's attention and indexer compressors: disjoint
  // frontiers and outputs): the same effects as one compressor() per job, in any order. A backend may
  // run them in one launch; the default calls compressor() for each.
  virtual void compressor_many(std::span<const CompressorArgs> jobs) {
    for (const CompressorArgs& j : jobs) compressor(j);
  }
  // compressor_many(jobs), then indexer_qat(qat) — a CSA layer's compressors and the indexer query's RoPE + QAT
  // (IndexerQatArgs::n_rot), which touch disjoint memory: both read the step's projections, neither reads
  // what the other writes. A backend may run them in one launch; the default calls the two.
  virtual void compressors_and_qat(std::span<const CompressorArgs> jobs, const IndexerQatArgs& qat) {
    compressor_many(jobs);
    indexer_qat(qat);
  }
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void indexer(const IndexerArgs& a) = 0;
  virtual void router(const RouterArgs& a) = 0;
  virtual void moe(const MoeArgs& a) = 0;
  virtual void swiglu(const SwigluArgs& a) = 0;
  virtual void argmax(const ArgmaxArgs& a) = 0;

 private:
  alignas(16) uint8_t read_back_[kReadBackSlots][kReadBackBytes] = {};  // the default read-back's slots
  int64_t graph_owners_ = 0;                                              // the last id graph_owner() gave
};

inline Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (owner_ && ptr_) owner_->release(ptr_, bytes_, cat_);
    owner_ = std::exchange(o.owner_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    cat_ = o.cat_;
  }
  return *this;
}
inline Buffer::~Buffer() {
  if (owner_ && ptr_) owner_->release(ptr_, bytes_, cat_);
}

inline Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    if (owner_) owner_->release_region(*this);
    owner_ = std::exchange(o.owner_, nullptr);
    cat_ = o.cat_;
    p_ = std::exchange(o.p_, Parts{});
  }
  return *this;
}
inline Region::~Region() {
  if (owner_) owner_->release_region(*this);
}

}  // namespace ds4::backend
