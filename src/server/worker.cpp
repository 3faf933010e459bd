// worker.cpp — see worker.h. The loop: admit queued jobs, then run ONE Engine::step that carries
// every decoding job's next token and the prefill chunks the scheduler granted. Cancellation and
// timeouts are checked per job between steps (a step is bounded by --max-batch-tokens, so a
// disconnect stops a request within one step); inside a step only a hard stop (drain over) cancels.
#include "server/worker.h"

#include <algorithm>

#include "server/worker_state.h"

namespace ds4::server {

using Clock = WorkerClock;

namespace {
kv::SchedOptions sched_options(const WorkerOptions& o, int64_t max_step) {
  kv::SchedOptions s;
  s.max_batch_tokens = o.max_batch_tokens > 0 ? std::min(o.max_batch_tokens, max_step) : max_step;
  s.prefill_chunk = o.prefill_step > 0 ? o.prefill_step : 512;
  return s;
}

kv::PrefixCacheOptions cache_options(const WorkerOptions& o) {
  kv::PrefixCacheOptions c;
  c.block_tokens = o.prefix_block_tokens > 0 ? o.prefix_block_tokens : 128;
  c.max_bytes = o.prefix_cache_bytes;
  return c;
}

bool hard_stop_only(void* user) { return static_cast<const std::atomic<bool>*>(user)->load(); }
}  // namespace

EngineWorker::EngineWorker(Engine& engine, const WorkerOptions& opts, SharedReplayStore& replay,
                           Metrics& metrics, std::FILE* trace)
    : engine_(engine),
      opts_(opts),
      replay_(replay),
      metrics_(metrics),
      trace_(trace),
      scheduler_(sched_options(opts, std::max<int64_t>(engine.max_step_tokens(), 1))),
      prefix_cache_(cache_options(opts)) {
  if (opts_.n_sessions < 0) opts_.n_sessions = 1;
  if (opts_.prefill_step < 1) opts_.prefill_step = 512;
  max_batch_tokens_ = scheduler_.options().max_batch_tokens;
  admission_.budget_bytes = opts_.kv_budget_bytes;
  // Decoders must fit one step with room left for prefill: at most half the step's tokens.
  const int cap = static_cast<int>(std::max<int64_t>(1, max_batch_tokens_ / 2));
  max_sessions_ = opts_.n_sessions > 0 ? opts_.n_sessions : cap;  // refined by learn_kv_cost()
  admission_.max_sessions = max_sessions_;
  mem_ = engine_.memory_report();
}

EngineWorker::~EngineWorker() { stop(std::chrono::milliseconds(0)); }

void EngineWorker::start() {
  if (thread_.joinable()) return;
  // Before the thread exists (the engine is still this thread's): the probe's prefill must not
  // delay the first request.
  learn_kv_cost();
  thread_ = std::thread([this] { run(); });
}

void EngineWorker::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      drain_deadline_ = Clock::now() + grace;
    } else {
      drain_deadline_ = std::min(drain_deadline_, Clock::now() + grace);
    }
    if (grace.count() == 0) hard_stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

Status EngineWorker::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("server shutting down");
    // Jobs whose clients already left do not hold a place in the queue.
    const size_t waiting = static_cast<size_t>(
        std::count_if(queue_.begin(), queue_.end(), [](const auto& j) { return !j->cancel.load(); }));
    if (waiting >= opts_.max_queue) {
      metrics_.count_rejected_busy();
      return unavailable("server busy: " + std::to_string(waiting) + " requests already waiting; retry later");
    }
    queue_.push_back(job);
    metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
  }
  cv_.notify_all();
  return Status::Ok();
}

size_t EngineWorker::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

MemoryReport EngineWorker::memory_snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mem_;
}

// The KV cost model for admission, from this engine: the growth per token is the engine's own rate
// (MemoryReport::kv_bytes_per_token, the formula the allocator commits by), and the fixed bytes are what a
// probe session holds after a short prompt minus that growth: the raw ring, the compressor frontiers and
// one partly filled commit block per growable region (the most block slack a session ever has), so the
// model is exact in the rate and conservative by at most one block per region. Only with a budget.
void EngineWorker::learn_kv_cost() {
  if (admission_.budget_bytes == 0) return;
  auto s = engine_.new_session();
  if (!s.ok()) return;
  Session& probe = **s;
  double rate = 0;
  for (double r : engine_.memory_report().kv_bytes_per_token) rate += r;
  kv_cost_.bytes_per_token = rate;
  kv_cost_.fixed_bytes = kv_bytes(probe.memory());
  const int64_t n = std::min<int64_t>(256, probe.max_context() - 1);
  if (n > 0) {
    std::vector<TokenId> toks(static_cast<size_t>(n), engine_.tokenizer().eos_id());
    if (probe.eval(toks).ok()) {
      const double after = static_cast<double>(kv_bytes(probe.memory()));
      kv_cost_.fixed_bytes = static_cast<uint64_t>(std::max(after - rate * static_cast<double>(n),
                                                            static_cast<double>(kv_cost_.fixed_bytes)));
    }
  }
  if (opts_.n_sessions == 0) {
    const int64_t typical = std::min<int64_t>(engine_.info().max_context > 0 ? engine_.info().max_context : 8192, 8192);
    max_sessions_ = kv::derive_max_sessions(admission_.budget_bytes, kv_cost_, typical, max_sessions_);
    admission_.max_sessions = max_sessions_;
  }
}

void EngineWorker::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      }
      if (stopping_ && Clock::now() >= drain_deadline_) hard_stop_ = true;
      if (stopping_ && queue_.empty() && active_.empty()) {
        lock.unlock();
        if (opts_.disk_cache)  // ds4's `shutdown` save of every live timeline
          for (auto& s : slots_)
            if (s->session) opts_.disk_cache->at_shutdown(*s->session, s->disk);
        break;
      }
      if (hard_stop_) {
        for (auto& j : queue_) j->cancel = true;
      }
    }
    assign_jobs();
    run_step();
    const size_t before = active_.size();
    std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->finished; });
    if (active_.size() != before) publish_batch(kv::StepPlan{});  // running/idle gauges after finishes
    metrics_.set_active(static_cast<int64_t>(active_.size()));
  }
}

bool EngineWorker::check_alive(Active& a) {
  Job& job = *a.job;
  if (job.cancel || hard_stop_) {
    finish(a, FinishReason::cancelled, cancelled(hard_stop_ ? "server shutting down" : "client disconnected"));
    return false;
  }
  if (Clock::now() >= job.deadline) {
    finish(a, FinishReason::error, unavailable("request timed out"));
    return false;
  }
  return true;
}

void EngineWorker::run_step() {
  // 1. Per job: drop the cancelled; decoders sample their next token (streamed now, evaluated in
  //    this step). A decoder left out of the last step keeps its sampled token.
  std::vector<Active*> jobs;
  std::vector<kv::SchedJob> sched;
  for (auto& up : active_) {
    Active& a = *up;
    if (a.finished) continue;
    if (!check_alive(a)) continue;
    if (a.decoding && a.feed.empty() && !next_feed(a)) continue;
    kv::SchedJob sj;
    sj.decoding = a.decoding;
    if (a.decoding) {
      sj.want = std::min<int64_t>(static_cast<int64_t>(a.feed.size()), 8);  // a forced opener goes in pieces
    } else {
      sj.want = static_cast<int64_t>(a.job->prompt.size() - a.prefilled);
      for (int64_t c : a.checkpoints)
        if (c > static_cast<int64_t>(a.prefilled)) {
          sj.cap = c - static_cast<int64_t>(a.prefilled);
          break;
        }
      if (opts_.disk_cache) {  // the chunk also stops at the next disk save point (cold anchor, continued)
        const int64_t lim = opts_.disk_cache->prefill_limit(a.slot->disk, static_cast<int64_t>(a.prefilled),
                                                             static_cast<int64_t>(a.job->prompt.size())) -
                            static_cast<int64_t>(a.prefilled);
        if (lim < sj.want && (sj.cap == 0 || lim < sj.cap)) sj.cap = lim;
      }
    }
    jobs.push_back(&a);
    sched.push_back(sj);
  }
  const kv::StepPlan plan = scheduler_.plan(sched);
  if (plan.grants.empty()) {
    publish_batch(plan);
    return;
  }

  // 2. One engine step over all granted sessions.
  std::vector<StepItem> items;
  std::vector<Active*> stepped;
  for (const kv::SchedGrant& g : plan.grants) {
    Active& a = *jobs[g.job];
    StepItem it;
    it.session = a.slot->session.get();
    if (a.decoding) it.tokens = std::span<const TokenId>(a.feed).first(static_cast<size_t>(g.tokens));
    else it.tokens = std::span<const TokenId>(a.job->prompt).subspan(a.prefilled, static_cast<size_t>(g.tokens));
    // The job's last pending token: a greedy job takes its next token from this step (4 bytes, no logits).
    const size_t pending = a.decoding ? a.feed.size() : a.job->prompt.size() - a.prefilled;
    a.greedy_ready = false;
    if (a.greedy && it.tokens.size() == pending) it.next = &a.greedy_next;
    items.push_back(it);
    stepped.push_back(&a);
  }
  EvalOptions eo;
  eo.should_cancel = &hard_stop_only;
  eo.cancel_user = const_cast<std::atomic<bool>*>(&hard_stop_);
  const auto t0 = Clock::now();
  Status st = engine_.step(items, eo);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ++steps_;
  if (trace_) {
    std::string line = "=== step " + std::to_string(steps_) + ": " + std::to_string(plan.decode_jobs) + " decode, " +
                       std::to_string(plan.prefill_jobs) + " prefill (" + std::to_string(plan.prefill_tokens) +
                       " tokens);";
    for (size_t i = 0; i < stepped.size(); ++i)
      line += " " + std::to_string(stepped[i]->job->id) + (stepped[i]->decoding ? ":d" : ":p") +
              std::to_string(items[i].tokens.size());
    std::fprintf(trace_, "%s\n", line.c_str());
    std::fflush(trace_);
  }
  if (!st.ok()) {
    if (hard_stop_ || st.code() == StatusCode::cancelled) {
      for (Active* a : stepped) finish(*a, FinishReason::cancelled, cancelled("server shutting down"));
      return;
    }
    // The batch failed as a whole and advanced nobody: find the job at fault by stepping each alone.
    for (size_t i = 0; i < stepped.size(); ++i) {
      Status one = engine_.step(std::span<const StepItem>(&items[i], 1), eo);
      if (!one.ok()) {
        finish(*stepped[i], FinishReason::error, one.with_context(stepped[i]->decoding ? "decode failed" : "prefill failed"));
        continue;
      }
      stepped[i]->greedy_ready = items[i].next != nullptr;
      after_step(*stepped[i], static_cast<int64_t>(items[i].tokens.size()));
    }
    publish_batch(plan);
    return;
  }
  if (plan.prefill_tokens > 0)
    metrics_.add_prefill(plan.prefill_tokens,
                         secs * static_cast<double>(plan.prefill_tokens) /
                             static_cast<double>(plan.prefill_tokens + plan.decode_tokens));
  for (size_t i = 0; i < stepped.size(); ++i) {
    stepped[i]->greedy_ready = items[i].next != nullptr;
    after_step(*stepped[i], static_cast<int64_t>(items[i].tokens.size()));
  }
  publish_batch(plan);
}

// A job's share of a step went through: advance its bookkeeping.
void EngineWorker::after_step(Active& a, int64_t tokens) {
  Job& job = *a.job;
  if (a.decoding) {
    a.feed.erase(a.feed.begin(), a.feed.begin() + tokens);
    if (opts_.disk_cache)  // continued saves (never inside a tool-call block)
      opts_.disk_cache->after_eval(*a.slot->session, a.slot->disk,
                                   a.parser && a.parser->state() == chat::ParseState::tool_block);
    return;
  }
  a.prefilled += static_cast<size_t>(tokens);
  save_checkpoint(a);
  if (opts_.disk_cache) opts_.disk_cache->after_eval(*a.slot->session, a.slot->disk, false);  // cold / continued
  GenEvent ev;
  ev.kind = GenEventKind::prefill;
  ev.prefill_done = static_cast<int64_t>(a.prefilled);
  ev.prefill_total = static_cast<int64_t>(job.prompt.size());
  job.events.push(std::move(ev));
  if (a.prefilled < job.prompt.size()) return;
  a.decoding = true;
  a.t_decode = Clock::now();
  if (a.max_new <= 0) finish(a, FinishReason::length);
}

// At a checkpoint the session holds exactly the prompt's first n tokens: save that state.
void EngineWorker::save_checkpoint(Active& a) {
  const int64_t pos = static_cast<int64_t>(a.prefilled);
  auto it = std::find(a.checkpoints.begin(), a.checkpoints.end(), pos);
  if (it == a.checkpoints.end()) return;
  a.checkpoints.erase(a.checkpoints.begin(), it + 1);
  if (prefix_cache_.contains(a.job->prompt, pos)) return;
  auto snap = a.slot->session->snapshot();
  if (!snap.ok()) return;  // a failed save only costs a later miss
  if (prefix_cache_.insert(a.job->prompt, pos, std::move(snap->bytes))) ++prefix_saves_;
}

void EngineWorker::publish_batch(const kv::StepPlan& plan) {
  BatchStats& b = batch_;
  if (!plan.grants.empty()) {
    b.batch_sessions = static_cast<int64_t>(plan.grants.size());
    b.batch_decode_tokens = plan.decode_tokens;
    b.batch_prefill_tokens = plan.prefill_tokens;
    b.batch_tokens = plan.decode_tokens + plan.prefill_tokens;
    b.steps = steps_;
    b.step_tokens += static_cast<uint64_t>(b.batch_tokens);
    b.step_sessions += static_cast<uint64_t>(b.batch_sessions);
  }
  int64_t running = 0;
  uint64_t reserved = 0;
  for (const auto& a : active_)
    if (!a->finished) {
      ++running;
      reserved += a->reserve_bytes;
    }
  uint64_t used = 0;
  int64_t idle = 0;
  for (const auto& s : slots_) {
    if (s->session) used += kv_bytes(s->session->memory());
    if (!s->busy) ++idle;
  }
  b.running = running;
  b.idle_sessions = idle;
  b.kv_reserved_bytes = reserved;
  b.kv_used_bytes = used;
  b.max_sessions = max_sessions_;
  b.max_batch_tokens = max_batch_tokens_;
  b.kv_budget_bytes = admission_.budget_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    b.waiting = static_cast<int64_t>(queue_.size());
  }
  const kv::PrefixCacheStats ps = prefix_cache_.stats();
  b.prefix_saves = prefix_saves_;
  b.prefix_evictions = ps.evictions;
  b.prefix_entries = ps.entries;
  b.prefix_bytes = ps.bytes;
  b.prefix_budget_bytes = opts_.prefix_cache_bytes;
  metrics_.set_batch(b);
}

}  // namespace ds4::server
