// hc_boundary.h — a decode token's sublayer boundary (the previous sublayer's HC post + the next HC pre,
// HcPreArgs::prev_post) as one launch: CudaBackendOptions::hc_post_fold = 2 (hc_boundary.cu). CudaBackend::hc_pre
// calls it where its options select the spread HC pre in the F16 MMA order (the path whose bits it reproduces);
// hc_post_fold = 3 runs it as a cluster of 16 blocks; 4 / 5 as 2 / 3, launched as programmatic dependents wherever
// hc_pdl allows (also after a concurrent branch's join, where hc_post's launch stays plain); 6 / 7 as 4 in the forms
// of HcBoundaryLaunch::form 1 / 9, 8 as 5 in form 9, 9 as 4 in form 25; 13 (session 13) as 4 in form 505
// (hc_boundary_form). 10 … 12 (505's stepping stones) and 14 (505 on 16 blocks) were removed in session 14.
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
  // other than 9) launch nothing (false). Session 13's (8 blocks, with 25; hc_boundary.cu's kernel comment): bit 32 —
  // the warp's two quarters in 3 m-tiles a k-step (96 MMAs, not 128); 64 — sums of pushed partial sums by warp_sum's
  // tree from shared memory; 256 — pushes as st.async completing on the adder's mbarrier, no cluster barriers after
  // (0); 128 (with 32) — each warp splits its own values, a stream's two warps add its segment sums. Of these only 505
  // (all four) launches.
  int form = 0;
  // Diagnostics (benches only; null in the backend): device array [kHcBoundaryStamps] receiving block 0's clock64 at
  // the phase ends — start, after the wait, the state formed, barrier 1, MMAs done, barrier 2, the split warp's mix,
  // its Sinkhorn end, xn stored.
  long long* stamps = nullptr;
};
inline constexpr int kHcBoundaryStamps = 9;

// CudaBackendOptions::hc_post_fold → HcBoundaryLaunch::form (ops_hc.cu and the benches): 2 … 5 → 0, 6 → 1, 7 and
// 8 → 9, 9 → 25, 13 → 505 (packed tiles, tree sums, mbarrier pushes, the warps' own split); -1 for every other value
// (0, 1: no boundary kernel; 10 … 12, 14: removed in session 14 — make_cuda_backend rejects them).
inline int hc_boundary_form(int hc_post_fold) {
  switch (hc_post_fold) {
    case 2: case 3: case 4: case 5: return 0;
    case 6: return 1;
    case 7: case 8: return 9;
    case 9: return 25;
    case 13: return 505;
    default: return -1;
  }
}
// Its cluster's blocks: 16 for hc_post_fold 3, 5 and 8, else 8.
inline int hc_boundary_cluster(int hc_post_fold) {
  return hc_post_fold == 3 || hc_post_fold == 5 || hc_post_fold == 8 ? 16 : 8;
}

// One cluster of 8 (or 16) blocks forms the new state X' (hc_post4_kernel's values, written to prev_post.out = a.x), its
// RMSNorm scale, the 24 F16 MMA control sums, mix, pre (and with_split post, comb), y and xn — the bits of hc_post
// then the spread pre (hc_seg_mma_kernel + hc_finish5_kernel). False (nothing launched) unless n = 1, nhc = 4,
// dim = 4096, F16 controls [24][16384], ds4 numerics and 16-byte aligned rows.
bool hc_boundary(CudaBackend& be, const HcPreArgs& a, const HcBoundaryLaunch& l);

}  // namespace ds4::backend::cuda
