#!/usr/bin/env bash
# fuzz.sh — build the libFuzzer targets with clang (ASan + UBSan + coverage on every library) in
# build-fuzz/ and run one of them.
# Usage: scripts/fuzz.sh [TARGET=gguf] [SECONDS=60] [extra libFuzzer flags...]
#   TARGET names a folder fuzz/TARGET/ with an executable fuzz_TARGET (and optionally a seed
#   generator TARGET_make_seeds that writes seed files into the folder given as its argument).
# The corpus grows in build-fuzz/corpus/TARGET (kept between runs); crashes go to
# build-fuzz/artifacts/TARGET/. Environment: DS4_FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${1:-gguf}"
SECONDS_TO_RUN="${2:-60}"
shift $(( $# > 2 ? 2 : $# ))
BUILD_DIR="${DS4_FUZZ_BUILD_DIR:-build-fuzz}"

if [ ! -d "fuzz/$TARGET" ]; then
  echo "fuzz.sh: no fuzz/$TARGET folder (targets: $(ls fuzz | tr '\n' ' '))" >&2
  exit 2
fi
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  GEN=()
  command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDS4_FUZZ=ON -DDS4_TESTS=OFF -DDS4_BENCH=OFF -DDS4_CUDA=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $SAN" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $SAN" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
fi
TARGETS=("fuzz_$TARGET")
if grep -q "${TARGET}_make_seeds" "fuzz/$TARGET/CMakeLists.txt"; then TARGETS+=("${TARGET}_make_seeds"); fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${TARGETS[@]}"

BIN="$(find "$BUILD_DIR/fuzz/$TARGET" -maxdepth 1 -type f -name "fuzz_$TARGET" | head -1)"
CORPUS="$BUILD_DIR/corpus/$TARGET"
SEEDS="$BUILD_DIR/seeds/$TARGET"
ARTIFACTS="$BUILD_DIR/artifacts/$TARGET"
mkdir -p "$CORPUS" "$SEEDS" "$ARTIFACTS"
if [ -x "$BUILD_DIR/fuzz/$TARGET/${TARGET}_make_seeds" ]; then
  "$BUILD_DIR/fuzz/$TARGET/${TARGET}_make_seeds" "$SEEDS"
fi
echo "fuzz.sh: running $BIN for ${SECONDS_TO_RUN}s (corpus $CORPUS, seeds $SEEDS)"
exec "$BIN" -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 -rss_limit_mb=2048 \
  -artifact_prefix="$ARTIFACTS/" "$@" "$CORPUS" "$SEEDS"
