// weight_rows.h — reading one row of a ggml-typed weight matrix as floats, and the two activation
// preparations ds4's CPU matvecs use (MODEL.md §12): Q8_0 int8 blocks for Q8_0 weights, Q8_K blocks
// for k-quant / IQ weights.
// Deliberately not here: the block formats themselves (src/quant), threading (ops_matmul.cpp).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace ds4::backend::cpu {

// out[w.cols] = row `row` of w, decoded to float.
void dequantize_weight_row(const Weight& w, int64_t row, float* out);

// What an input row becomes before ds4-numerics dot products with weights of type `t`.
enum class ActKind { f32, q8_0, q8_k };
ActKind act_kind(GgmlType t, MatmulNumerics numerics);
// Bytes of one prepared activation row of `cols` values.
uint64_t act_row_bytes(ActKind k, int64_t cols);
// x[cols] → prepared bytes (q8_0 / q8_k blocks); f32 rows are used in place and need no preparation.
void prepare_act_row(ActKind k, const float* x, int64_t cols, uint8_t* out);

// True when a float-activation dot needs the row decoded to float first (quantized weights with exact
// numerics, F16 with exact numerics); the caller decodes once per row and uses dot_f32_double.
bool needs_row_decode(const Weight& w, ActKind k, MatmulNumerics numerics);
// Σ w[i]·x[i] accumulated in double (4 lanes).
float dot_f32_double(const float* w, const float* x, int64_t n);

struct RowDot {
  const Weight* w = nullptr;
  ActKind kind = ActKind::f32;
  MatmulNumerics numerics = MatmulNumerics::ds4;
};
// Dot of weight row `row` with one activation row, for rows that need no decoding: `x` is the float
// row, `act` the prepared row (q8_0 / q8_k kinds).
float weight_row_dot(const RowDot& d, int64_t row, const float* x, const uint8_t* act);

}  // namespace ds4::backend::cpu
