#!/usr/bin/env python3
"""kv_disk_ttft.py — time to first token of an agent-style prompt, cold vs disk KV cache hit.

Runs ds4-server three times on one model (stdlib only, loopback):
  1. no disk cache           : cold TTFT of prompt A (the baseline)
  2. --kv-disk-dir D (empty) : cold TTFT of prompt A with the cold save inside the prefill;
                               then SIGTERM (the shutdown save)
  3. --kv-disk-dir D again   : a restarted server; prompt B (same agent system prompt and tools,
                               another question) and prompt A: TTFT of disk hits
and prints TTFTs, the server's save/restore log lines (bytes, B/token, seconds) and the bandwidth
they imply. TTFT = request sent -> first streamed content/reasoning delta (greedy, 1 token).

Usage: scripts/kv_disk_ttft.py --server build/tools/ds4-server/ds4-server \
         --model models/ds4-tiny-chat.gguf --tokens 25000 [--server-arg=--cuda ...]
Deliberately not here: correctness checks (tests/kvstore/server does those).
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega vector buffer stream "
         "socket parser token cache index shard replica budget limit window prefix suffix").split()


def agent_system_prompt(approx_tokens):
    """A deterministic agent prompt: instructions plus many tool descriptions (~1 token/word)."""
    out = ["You are a coding agent working in a large repository. Follow the rules and use the tools."]
    i = 0
    while sum(len(s.split()) for s in out) * 1.25 < approx_tokens:
        name = "tool_%d_%s" % (i, WORDS[i % len(WORDS)])
        desc = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(24))
        out.append("## %s\nDescription: %s.\nParameters: {\"path\": string, \"limit\": integer %d}\n" % (name, desc, i))
        i += 1
    return "\n".join(out)


def start(server, model, extra, cache_dir, log_path, lock):
    args = [server, "-m", model, "--port", "0", "--ctx", "32768", "--nothink"] + extra
    if cache_dir:
        args += ["--kv-disk-dir", cache_dir]
    env = dict(os.environ, DS4_LOCK_FILE=lock)
    log = open(log_path, "w")
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=env)
    for _ in range(6000):
        with open(log_path) as f:
            m = re.search(r"listening on http://[\d.]+:(\d+)", f.read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            sys.exit("server exited:\n" + open(log_path).read())
        time.sleep(0.05)
    sys.exit("server did not start")


def ttft(port, system, user):
    body = json.dumps({"model": "deepseek-v4-flash", "stream": True, "max_tokens": 1, "temperature": 0,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    usage = {}
    for raw in r:  # SSE lines
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            d = ch.get("delta", {})
            if first is None and (d.get("content") or d.get("reasoning_content")):
                first = time.monotonic() - t0
    total = time.monotonic() - t0
    return (first if first is not None else total), usage


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="build/tools/ds4-server/ds4-server")
    ap.add_argument("--model", default="models/ds4-tiny-chat.gguf")
    ap.add_argument("--tokens", type=int, default=25000)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--keep", action="store_true", help="keep the cache directory")
    ap.add_argument("--no-baseline", action="store_true", help="skip run 1 (the cold run with the cache is the baseline)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kv_disk_ttft_")
    cache = os.path.join(work, "cache")
    lock = os.path.join(work, "lock")
    system = agent_system_prompt(a.tokens)
    qa, qb = "Which tool reads a file?", "Which tool lists a directory?"

    t_base = None
    if not a.no_baseline:
        p, port = start(a.server, a.model, a.server_arg, None, os.path.join(work, "base.log"), lock)
        t_base, u = ttft(port, system, qa)
        stop(p)
        n = u.get("prompt_tokens", 0)
        print("prompt tokens: %d" % n, flush=True)
        print("no cache : cold TTFT %.2f s (%.0f tok/s)" % (t_base, n / t_base), flush=True)

    p, port = start(a.server, a.model, a.server_arg, cache, os.path.join(work, "s1.log"), lock)
    t_cold, u = ttft(port, system, qa)
    stop(p)
    print("cache    : cold TTFT %.2f s (%d prompt tokens, includes the cold and continued saves), cached %d" %
          (t_cold, u.get("prompt_tokens", 0), u.get("prompt_tokens_details", {}).get("cached_tokens", 0)), flush=True)
    if t_base is None:
        t_base = t_cold

    p, port = start(a.server, a.model, a.server_arg, cache, os.path.join(work, "s2.log"), lock)
    t_b, ub = ttft(port, system, qb)
    t_a, ua = ttft(port, system, qa)
    stop(p)
    cb = ub.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    ca = ua.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    print("restarted: disk hit TTFT %.2f s (new question, %d of %d tokens restored), speedup %.1fx" %
          (t_b, cb, ub.get("prompt_tokens", 0), t_base / t_b))
    print("restarted: same prompt TTFT %.2f s (%d restored; live session after the first)" % (t_a, ca))
    for name in ("s1.log", "s2.log"):
        for line in open(os.path.join(work, name)):
            if "kv-disk:" in line:
                print("  " + name + ": " + line.strip())
    size = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
    print("cache directory: %d files, %.1f MB" % (len(os.listdir(cache)), size / 1e6))
    if not a.keep:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
