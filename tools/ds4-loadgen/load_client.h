// load_client.h — one streaming client of ds4-loadgen: sends /v1/completions requests with
// "stream": true and records when the first and last tokens arrived and how many came.
// Deliberately not here: flags, threads, statistics (main.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ds4::loadgen {

using Clock = std::chrono::steady_clock;

struct Target {
  std::string host = "127.0.0.1";
  int port = 8000;
};

struct RequestSpec {
  std::string prompt;
  int64_t max_tokens = 128;
  bool ignore_eos = true;
  std::string api_key;
  int timeout_s = 3600;
};

struct RequestResult {
  bool ok = false;
  int http_status = 0;
  std::string error;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  int64_t chunks = 0;  // SSE chunks carrying text
  std::vector<Clock::time_point> text_times;  // arrival of each text chunk (the steady-window rate)
  Clock::time_point t_send, t_first, t_last, t_end;
  double ttft_s() const { return std::chrono::duration<double>(t_first - t_send).count(); }
  // Decode rate after the first token: (tokens − 1) over the time from the first to the last token.
  double decode_tok_s() const {
    const double d = std::chrono::duration<double>(t_last - t_first).count();
    return completion_tokens > 1 && d > 0 ? static_cast<double>(completion_tokens - 1) / d : 0;
  }
};

RequestResult run_request(const Target& target, const RequestSpec& spec);

}  // namespace ds4::loadgen
