// ops_matmul.cpp — y = W·x for a batch of rows, with ds4's or exact numerics (weight_rows.h).
#include <algorithm>

#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/weight_rows.h"

namespace ds4::backend::cpu {

void CpuBackend::matmul(const MatmulArgs& a) {
  if (a.group_rows > 0) {  // grouped form: one plain call per row slice, each over its own inputs
    for_each_row_group(a, [&](const MatmulArgs& s) { matmul(s); });
    return;
  }
  // x: [n][x_stride] (first w.cols used), y: [n][y_stride] (first w.rows written).
  const ActKind kind = act_kind(a.w.type, a.numerics);
  const uint64_t act_bytes = act_row_bytes(kind, a.w.cols);
  uint8_t* act = nullptr;
  if (act_bytes) {
    act = grow(act_quant_, act_bytes * static_cast<uint64_t>(a.n)).data();
    pool_.parallel_for(a.n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) prepare_act_row(kind, a.x + i * a.x_stride, a.w.cols, act + i * act_bytes);
    }, a.w.cols);
  }
  auto& scratch = thread_scratch(static_cast<size_t>(a.w.cols));
  const int64_t total = a.n * a.w.rows;
  const bool decode = needs_row_decode(a.w, kind, a.numerics);
  const RowDot rd{&a.w, kind, a.numerics};
  // Work items are (output row, token) pairs, row-major, so a weight row is read (and, when needed,
  // decoded into the part's scratch row) once for all tokens of the batch.
  const int64_t parts = pool_.parts_for(total, a.w.cols);
  pool_.parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* tmp = scratch[static_cast<size_t>(p)].data();
      int64_t cached = -1;
      const int64_t begin = total * p / parts, end = total * (p + 1) / parts;
      for (int64_t k = begin; k < end; ++k) {
        const int64_t o = k / a.n, i = k % a.n;
        const float* x = a.x + i * a.x_stride;
        float y;
        if (decode) {
          if (o != cached) {
            dequantize_weight_row(a.w, o, tmp);
            cached = o;
          }
          y = dot_f32_double(tmp, x, a.w.cols);
        } else {
          y = weight_row_dot(rd, o, x, act ? act + i * act_bytes : nullptr);
        }
        a.y[i * a.y_stride + o] = y;
      }
    }
  }, ThreadPool::kMinWorkPerPart);
}

}  // namespace ds4::backend::cpu
