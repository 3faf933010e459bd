#!/usr/bin/env bash
# gpu_prefill_check.sh — validation of a CUDA build on the H200 (op tests incl. batched-table attention, tiny models incl.
# batched vs solo) and ds4-bench on a 4-layer full-width flash-q2 file with and without the prefill kernels.
# Short (~40 s of device time); the full-size reference check is gpu_reference.sh. Same pack:
#   here:   scripts/gpu_reference.sh --pack BUILD_DIR PACK_DIR
#   there:  bash PACK_DIR/gpu_prefill_check.sh PACK_DIR OUT_DIR     (from the repository root)
P=$(cd "$1" && pwd); O=$2; export LD_LIBRARY_PATH=$P/lib
W=/tmp/r2; mkdir -p $W /tmp/d
t0=$(date +%s); st() { echo "[+$(( $(date +%s)-t0 )) s] $*"; }
trap 'cp $W/*.csv $O/ 2>/dev/null; tar czf $O/logs2.tgz -C $W .' EXIT
timeout 120 $P/test_cuda_ops > $W/ops.log 2>&1; st "test_cuda_ops rc=$? $(grep -c 'OK \]' $W/ops.log) ok"; grep -E '^\[  FAILED  \] [A-Z]' $W/ops.log | sort -u
$P/ds4-gen --profile tiny --seed 1 -o /tmp/d/tiny-seed1.gguf >/dev/null 2>&1; $P/ds4-gen --profile tiny-quant --seed 1 --threads 2 -o /tmp/d/tiny-quant-seed1.gguf >/dev/null 2>&1; cp models/ds4-tiny-chat.gguf /tmp/d/
DS4_CUDA_TEST_DATA=/tmp/d DS4_REFERENCE_DIR=$(pwd)/tests/reference timeout 120 $P/test_cuda_model > $W/model.log 2>&1; st "test_cuda_model rc=$?"
grep -E '^\[  FAILED  \] [A-Z]|official cuda (prefill vs cpu|decode vs cuda prefill)|^BATCH .*official' $W/model.log | head -20
timeout 60 $P/cuda_prefill_bench 4096 > $W/prefill_bench.log 2>&1; st "cuda_prefill_bench rc=$?"; grep PBENCH $W/prefill_bench.log
zcat $P/data/tokenizer.json.gz > /tmp/tok.json
$P/ds4-gen --profile flash-q2 --layers 4 --zeros --tokenizer-json /tmp/tok.json -o /dev/shm/f4.gguf > $W/gen4.log 2>&1; st "gen 4 layers rc=$?"
for tc in "" "--cuda-no-tensor-cores"; do
  n=f4${tc:+_notc}
  timeout 80 $P/ds4-bench -m /dev/shm/f4.gguf --cuda $tc --prompt-file $P/ref/p2_prompt.txt --ctx-start 2048 --ctx-max 8192 \
    --step-incr 2048 -n 32 --chunk 2048 --csv $W/$n.csv > $W/$n.log 2>&1; st "ds4-bench 4 layers $tc rc=$?"; grep -E "uploaded|prefill" $W/$n.log
done
