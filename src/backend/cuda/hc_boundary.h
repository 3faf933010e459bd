// hc_boundary.h — a decode token's sublayer boundary (the previous sublayer's HC post + the next HC pre,
// HcPreArgs::prev_post) as one launch: CudaBackendOptions::hc_post_fold = 2 (hc_boundary.cu). CudaBackend::hc_pre
// calls it where its options select the spread HC pre in the F16 MMA order (the path whose bits it reproduces);
// hc_post_fold = 3 runs it as a cluster of 16 blocks; 4 / 5 as 2 / 3, launched as programmatic dependents wherever
// hc_pdl allows (also after a concurrent branch's join, where hc_post's launch stays plain); 6 / 7 as 4 in the forms
// of HcBoundaryLaunch::form 1 / 9, 8 as 5 in form 9, 9 as 4 in form 25.
// Deliberately not here: the decision which options allow it (ops_hc.cu, where the backend's flags are).
#pragma once

#include "backend/backend.h"

namespace ds4::backend::cuda {

class CudaBackend;

struct HcBoundaryLaunch {
  bool pdl = false;         // a programmatic dependent of the kernel before it (hc_post's rule: main lane, no branches)
  bool with_split = true;   // the Sinkhorn split (post, comb) inside, as the spread pre's split block
  int cluster = 8;          // blocks of the cluster: 8 (portable) or 16 (half the weights and loads a block)
  // Session 12's forms (same bits; hc_post_fold 6 / 7 / 9 = 1 / 9 / 25 on 8 blocks, 8 = 9 on 16): bit 1 — the split
  // warp arrives at the y norm's cluster barrier before gathering the mix; bit 8 (with bit 1) — the partial sums pushed
  // into the blocks that add them (remote stores before each barrier, not loads after it); bit 16 — the activations'
  // TF32 split formed once per value in shared memory. 0: session 11's kernel; other values (and 16 blocks with a form
  // other than 9) launch nothing (false).
  int form = 0;
  // Diagnostics (benches only; null in the backend): device array [kHcBoundaryStamps] receiving block 0's clock64 at
  // the phase ends — start, after the wait, the state formed, barrier 1, MMAs done, barrier 2, the split warp's mix,
  // its Sinkhorn end, xn stored.
  long long* stamps = nullptr;
};
inline constexpr int kHcBoundaryStamps = 9;

// One cluster of 8 (or 16) blocks forms the new state X' (hc_post4_kernel's values, written to prev_post.out = a.x), its
// RMSNorm scale, the 24 F16 MMA control sums, mix, pre (and with_split post, comb), y and xn — the bits of hc_post
// then the spread pre (hc_seg_mma_kernel + hc_finish5_kernel). False (nothing launched) unless n = 1, nhc = 4,
// dim = 4096, F16 controls [24][16384], ds4 numerics and 16-byte aligned rows.
bool hc_boundary(CudaBackend& be, const HcPreArgs& a, const HcBoundaryLaunch& l);

}  // namespace ds4::backend::cuda
