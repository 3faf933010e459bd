#!/usr/bin/env bash
# gpu_prefill_profile.sh — where a prefill chunk's time goes besides the GEMMs (issue 5), in one GPU call:
#  1. the attention / indexer tests (parity with the CPU op, bit-identity across launch shapes and batch
#     sizes, Flash shapes at n = 1, 40, 2,048 and 2K / 32K context) and test_cuda_model (batched ≡ solo);
#  2. cuda_prefill_bench's PSTAGE lines: attention CSA/HCA, indexer, compressor for a 2,048-token chunk
#     and a decode step at 2K and 32K, current kernels next to the previous ones;
#  3. ds4-bench on a 4-layer flash-q2 file (2 layers without compressor, 1 CSA, 1 HCA), 2K..32K, chunk 2048;
#  4. ncu per-launch kernel times (CSV) of a 4,096-token prefill (two 2,048-token chunks) of that file.
# Builds nothing.
#   here:   scripts/gpu_prefill_profile.sh --pack BUILD_DIR PACK_DIR    (BUILD_DIR configured with -DDS4_CUDA=ON)
#   there:  scripts/gpu_prefill_profile.sh PACK_DIR [OUT_DIR]           (env TESTS=0 / NCU=0 skip 1 / 4)
set -u
if [ "${1:-}" = "--pack" ]; then
  . "$(dirname "$0")/gpu_pack_common.sh"
  B=${2:?build dir}; P=${3:?pack dir}
  rm -rf "$P"; mkdir -p "$P/lib" "$P/data"
  cp "$B/tests/cuda/test_cuda_ops" "$B/tests/cuda/test_cuda_model" "$B/tests/cuda/cuda_prefill_bench" \
    "$B/tools/ds4-gen/ds4-gen" "$B/tools/ds4-bench/ds4-bench" "$P/"
  strip "$P"/test_cuda_ops "$P"/test_cuda_model "$P"/cuda_prefill_bench "$P"/ds4-gen "$P"/ds4-bench
  pack_tokenizer "$P"
  cp "$(dirname "$0")/../../shared/data/promessi_sposi.txt" "$P/data/prompt.txt"
  pack_libs "$P" "$P"/test_cuda_ops "$P"/test_cuda_model "$P"/cuda_prefill_bench "$P"/ds4-gen "$P"/ds4-bench
  du -sh "$P"; exit 0
fi
P=$(cd "${1:?usage: gpu_prefill_profile.sh PACK_DIR [OUT_DIR]}" && pwd)
O=${2:-${OUT:-/tmp/gpu_prefill_profile}}; mkdir -p "$O"
ROOT=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}  # the repository (models/, tests/reference)
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
t0=$(date +%s)
st() { echo "[+$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/summary.txt"; }
echo "gpu_prefill_profile: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(date -u +%F' '%H:%M' UTC')" | tee "$O/summary.txt"
if [ "${TESTS:-1}" != 0 ]; then
  timeout 120 "$P/test_cuda_ops" --gtest_color=no \
    --gtest_filter="${OPS_FILTER:-CudaAttention.*:CudaOps.Indexer*:CudaOps.Attention*:CudaOps.Compressor*:CudaBatchOps.*}" > "$O/ops.log" 2>&1
  st "test_cuda_ops rc=$? $(grep -c '^PARITY.* ok$' "$O/ops.log") parity ok, $(grep -c '^PARITY.*FAIL' "$O/ops.log") failed"
  grep -E '^\[  (PASSED|FAILED)|Failure|^\[  FAILED  \] [A-Z]' "$O/ops.log" | head -n 20 | tee -a "$O/summary.txt"
  D=/tmp/gpu_prefill_data; mkdir -p "$D"
  "$P/ds4-gen" --profile tiny --seed 1 -o "$D/tiny-seed1.gguf" > /dev/null 2>&1
  "$P/ds4-gen" --profile tiny-quant --seed 1 --threads 16 -o "$D/tiny-quant-seed1.gguf" > /dev/null 2>&1
  ln -sf "$ROOT/models/ds4-tiny-chat.gguf" "$D/ds4-tiny-chat.gguf"
  DS4_CUDA_TEST_DATA=$D DS4_REFERENCE_DIR=$ROOT/tests/reference timeout 120 "$P/test_cuda_model" --gtest_color=no \
    > "$O/model.log" 2>&1
  st "test_cuda_model rc=$?"
  grep -E '^\[  (PASSED|FAILED)|^\[  FAILED  \] [A-Z]' "$O/model.log" | tee -a "$O/summary.txt"
fi
timeout 60 "$P/cuda_prefill_bench" 2048 stages > "$O/stages.log" 2>&1; st "cuda_prefill_bench 2048 stages rc=$?"
grep PSTAGE "$O/stages.log" | tee -a "$O/summary.txt"
F=/dev/shm/flash-q2-l4.gguf
"$P/ds4-gen" --profile flash-q2 --layers 4 --zeros --tokenizer-json "$P/data/tokenizer.json" -o "$F" > "$O/gen.log" 2>&1
st "ds4-gen 4 layers rc=$?"
timeout 60 "$P/ds4-bench" -m "$F" --cuda --prompt-file "$P/data/prompt.txt" --ctx-start 2048 --ctx-max 32768 --step-mul 2 \
  -n 32 --chunk 2048 --csv "$O/flash_q2_l4.csv" > "$O/bench.log" 2>&1; st "ds4-bench 4 layers 2K..32K rc=$?"
cut -d, -f1-4 "$O/flash_q2_l4.csv" | tee -a "$O/summary.txt"
if [ "${NCU:-1}" != 0 ]; then
  NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  timeout 60 "$NCUB" --clock-control none --metrics gpu__time_duration.sum --print-units base --csv "$P/ds4-bench" -m "$F" --cuda \
    --prompt-file "$P/data/prompt.txt" --ctx-start 4096 --ctx-max 4096 -n 2 --chunk 2048 > "$O/ncu.csv" 2> "$O/ncu.err"
  st "ncu prefill 4096 rc=$? ($(grep -c gpu__time_duration "$O/ncu.csv") kernel launches)"
fi
rm -f "$F"
