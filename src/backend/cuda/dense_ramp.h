// dense_ramp.h — how a decode step's dense Q8_0 matvecs start under the kernel before them (their "ramp"):
// bits of CudaBackendOptions::l2_prefetch_mode above its low nibble (the Backend::prefetch mode, 0 … 2, which
// l2_prefetch.cu reads masked). A 35 MB matvec at one token pays ~4–5 µs over its bytes (docs/PERF.md
// session 10/12 dense sections), most of it before its first tiles land and after its last; these let more of
// its weight bytes move while the kernel before it still runs. Scheduling only: every bit gives the same bits.
// Session 12 (engineer dense) measured them on whole decode steps (cuda_bench --ramp-steps): kRampDefault below.
// Deliberately not here: the kernels (gemv_rows.cu), the option itself (cuda_backend.h).
#pragma once

namespace ds4::backend::cuda {

// The low nibble: Backend::prefetch's mode (l2_prefetch.cu).
constexpr int kL2PrefetchModeMask = 15;
// (16 was q_a's RMSNorm calling griddepcontrol.launch_dependents at its start, so that q_b — gemv_stream's bulk
// ring, ~70 % of its bytes requested before griddepcontrol.wait — launched while the norm waited for q_a: decode
// steps at batch 1 +8 and +30 µs on 4 layers in the session-12 W1 and W2 runs (q_b's early blocks and copies
// under q_a and beside the side lane's KV path cost more than the ramp they hid) — removed.)
// (32 was gemv_rows asking its whole row range into L2 before griddepcontrol.wait: 5.5 % slower decode steps
// in the session-12 W1 run, as every L2 prefetch of the dense weights measured before — removed.)
// gemv_rows: before griddepcontrol.wait a block moves tile 0 into its octet registers (waiting for the bytes)
// and puts tile 1's loads in flight: two tiles (~140 KB an SM) move under the kernel before instead of one.
constexpr int kRampRowsTwoTiles = 64;
// With kRampRowsTwoTiles: only in launches of one vector (batch 1; W1 measured batch 2 once, slower).
constexpr int kRampTwoTilesOneVector = 512;
// gemv_rows, activations quantized in the kernel (n·cols ≤ 8,192: out_a, out_b at one token): straight into the
// per-octet layout with one memory round trip a warp (gemv_rows.cu quantize_to_octets) instead of BlockQ8_0Act
// rows in two rounds, a barrier and a rearranging pass — the post-wait prologue every block runs before tile 0.
constexpr int kRampDirectQuant = 256;
// gemv_rows (sm_90): the staging area as a ring of two whole-tile slots filled by cp.async (gemv_rows.cu
// copy_chunks), so two tiles are in flight in the steady state too while one is computed, instead of the one in the
// `ch` registers: the per-tile loads, not the start, are most of a 35 MB matvec's time (W1/W2 above).
constexpr int kRampRowsRing = 1024;
// With kRampRowsRing: only in launches of two or more vectors (W3: batch 2 faster in every round, batch 1 mixed).
constexpr int kRampRingFromTwoVectors = 2048;

// gemv_rows at one vector (sm_90): the half kernel — a one-slot cp.async ring, ≤ 128 registers and ≤ 112 KB a block —
// as two blocks an SM (each half the rows), on launches whose blocks then keep ≥ 7/8 of a tile's rows (out_a: 31 of
// 32, the head; not out_b: 15.5 rows of 32-row tiles, which keeps the register path): two tiles in flight per SM in the
// steady state and one block's terms and chains under the other's loads. Session 13 (engineer dense), 4-layer
// decode steps at 2K (W4, 31434e6): 0.7990 / 0.8000 / 0.7985 / 0.7983 / 0.7999 ms against 0.8070 / 0.8064 / 0.8070 /
// 0.8071 / 0.8055 without it. Measured and removed (docs/PERF.md session 13 dense): the half kernel at one block an
// SM (its programmatic dependent resident beside it: out_a / out_b alone −1.5 / −1.8 µs in three runs, whole steps
// +2 … +5 µs), with the dependents launched from the last or second-last tile, with out_a padded past half an SM,
// two blocks on every launch (out_b's half-empty tiles), and q_b on it instead of gemv_stream's bulk ring 2.
constexpr int kRampRowsHalf = 4096;
// With kRampRowsHalf: the half kernel also where 32-row tiles would run half empty but 16-row tiles of 16 octets stay
// full (out_b, 4096 × 8192: 15.5 rows a block of 264 — two full tiles a block, each row's chain 128 adds over two
// tiles instead of four half-empty 32-row tiles). Session 14 (engineer dense) measures it on whole steps.
constexpr int kRampHalfRows16 = 524288;
// q_a's RMSNorm (rms_norm3_kernel on PDL launches: q_a's norm, the output norm) calls griddepcontrol.launch_dependents
// right after its griddepcontrol.wait: its dependent (q_b's bulk ring 2, the head) starts its weight copies while the
// norm reads, sums and writes its row — not under q_a, as session 12's trigger at the norm's start did (lost). The
// dependent still waits (griddepcontrol.wait) for the norm's end before it reads the row: the same bits.
constexpr int kRampNormTrigger = 1048576;
// With kRampRowsHalf: the half kernel's ring slot filled by cp.async.bulk copies, one per row piece of each warp's
// slice, issued by one lane each and completing on the warp's mbarrier (gemv_rows.cu bulk_slice), instead of 17
// cp.async copies a thread and their address walk (~579 instructions a tile from the slot's wait to the terms).
constexpr int kRampRowsBulk = 4194304;
// (2097152 was the half kernel's copies addressed without walk_chunks' `while` loop — its wrap as predicated steps,
// 32-bit offsets from the tile: ptxas, at the 128-register cap, rematerialised the 64-bit tile address inside each
// predicated copy, ~676 instructions from the slot's wait to the terms against ~579; 4-layer steps at 2K +7.0 µs,
// 5 of 5 rounds slower in session 14's W2 — removed.)

// With this bit the ramp bits are exactly those given (before/after runs: 128 alone = none of them); without it
// (the option's default 0) they are kRampDefault, whatever else is set.
constexpr int kRampExplicit = 128;
// The ramp bits a backend uses by default: gemv_rows' two tiles before griddepcontrol.wait at one vector, its
// activations quantized straight into the octet layout, the ring from two vectors, the half kernel at one vector.
// Session-12 runs, 4-layer flash-q2 decode steps with the engine's options (cuda_bench --ramp-steps, ms a step,
// three rounds each): W1 batch 1 at 2K two tiles 0.8170 /
// 0.8185 / 0.8134 against 0.8264 / 0.8280 / 0.8275; W2 two tiles + direct quantization 0.8013 / 0.8006 / 0.7998
// against 0.8067 / 0.8009 / 0.8091; batch 2 at 1K: two tiles 1.1924 against 1.1738 in W1's one round and even in
// W2, direct quantization even (1.1578 / 1.1653 / 1.1501 against 1.1595 / 1.1569 / 1.1455) — so tiles at one vector.
// And the ring from two vectors: W3 (08d09ce) batch 2 at 1K, the ring with those bits 1.1455 / 1.1454 / 1.1458
// against 1.1574 / 1.1599 / 1.1740 (those bits alone) and 1.1574 / 1.1779 / 1.1642 (none); at batch 1 the ring was
// faster than those bits in two rounds of three (0.8356 / 0.8240 / 0.8063 against 0.8049 / 0.8348 / 0.8106): not taken.
// And the half kernel (session 13 W4, 31434e6: batch 1 at 2K, 5 of 5 rounds 7.4 µs a 4-layer step faster — above).
// And session 14's two (W1, 8a18cd1; 4-layer steps batch 1 at 2K, rounds 1–5, ms): out_b on 16-row half tiles
// 0.8015 / 0.8003 / 0.7945 / 0.7974 / 0.7893, the norm trigger 0.8047 / 0.7962 / 0.7948 / 0.8000 / 0.7999, both
// 0.8008 / 0.8011 / 0.7968 / 0.7927 / 0.7968, against 0.8114 / 0.8099 / 0.8024 / 0.8039 / 0.8051 without them
// (−9.9, −7.4, −8.9 µs a step on average, every round faster); batch 2 one round even (1.2190 both, 1.2266 without).
// And the bulk copies (W3, 59ca3c7): 0.7791 / 0.7807 / 0.7799 / 0.7777 / 0.7767 against 0.7855 / 0.7834 / 0.7857 /
// 0.7808 / 0.7792 without (−4.1 µs a step, every round), one layer's dense matvecs 63.24 against 64.07 µs.
constexpr int kRampDefault = kRampRowsTwoTiles | kRampTwoTilesOneVector | kRampDirectQuant | kRampRowsRing |
                             kRampRingFromTwoVectors | kRampRowsHalf | kRampHalfRows16 | kRampNormTrigger |
                             kRampRowsBulk;

inline int l2_prefetch_base_mode(int mode) { return mode & kL2PrefetchModeMask; }
// The ramp bits of CudaBackendOptions::l2_prefetch_mode `mode`.
inline int dense_ramp_bits(int mode) {
  constexpr int kAll = kRampRowsTwoTiles | kRampDirectQuant | kRampTwoTilesOneVector | kRampRowsRing |
                       kRampRingFromTwoVectors | kRampRowsHalf | kRampHalfRows16 | kRampNormTrigger | kRampRowsBulk;
  return (mode & kRampExplicit) != 0 ? mode & kAll : kRampDefault;
}

}  // namespace ds4::backend::cuda
