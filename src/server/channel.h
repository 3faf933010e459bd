// channel.h — a per-request, multi-producer/single-consumer queue of values between the engine worker
// and the HTTP thread that serves the request (STYLE.md principle 7: results come back through
// per-request channels; the worker never touches a socket).
//
// Deliberately unbounded: the worker produces at most a few events per generated token, and the HTTP
// thread drains continuously; a stalled client is detected by the transport, which then cancels.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace ds4::server {

template <typename T>
class Channel {
 public:
  void push(T value) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(value));
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` for a value; nullopt on timeout (the caller then polls its socket).
  std::optional<T> pop_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    T v = std::move(items_.front());
    items_.pop_front();
    return v;
  }
  std::optional<T> try_pop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (items_.empty()) return std::nullopt;
    T v = std::move(items_.front());
    items_.pop_front();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
};

}  // namespace ds4::server
