#!/usr/bin/env bash
# demo.sh — the README's main command: set up, build, make the built-in tiny model, start ds4-server
# on it, answer one real OpenAI-style chat request with curl, and stop the server.
# Usage: scripts/demo.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-8000}"
scripts/setup.sh
scripts/build.sh
BIN=build/tools
# The trained default model (committed; docs/TRAINED_MODEL.md): real architecture and tokenizer,
# 30 MiB, trained on public-domain English and Italian text, so the answer is in real words.
MODEL=models/ds4-tiny-chat.gguf
"$BIN/ds4-server/ds4-server" -m "$MODEL" --host 127.0.0.1 --port "$PORT" --ctx 4096 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 0.2
done
echo "demo: POST /v1/chat/completions"
curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "model": "deepseek-v4-flash",
  "messages": [{"role": "user", "content": "Continue: Quel ramo del lago di Como"}],
  "max_tokens": 48, "temperature": 0, "thinking": {"type": "disabled"}
}'
echo
