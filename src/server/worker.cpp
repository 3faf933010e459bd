// worker.cpp — see worker.h. One loop: take queued jobs into idle slots, then give every active job
// one step. A step is a prefill chunk (polled for cancellation inside the engine too) or one decoded
// token, so a disconnect or timeout stops a request within one step, also during prefill.
#include "server/worker.h"

#include <algorithm>
#include <optional>

#include "server/sampler.h"
#include "server/text_util.h"

namespace ds4::server {

using Clock = std::chrono::steady_clock;

struct EngineWorker::Slot {
  std::unique_ptr<Session> session;
  bool busy = false;
};

struct EngineWorker::Active {
  std::shared_ptr<Job> job;
  Slot* slot = nullptr;
  bool decoding = false;
  size_t prefilled = 0;      // prompt tokens already in the session
  int64_t cached = 0;        // prompt tokens reused from the live session
  int64_t max_new = 0;
  int64_t generated = 0, reasoning_tokens = 0;
  std::optional<ds4::Sampler> sampler;
  std::optional<chat::DsmlParser> parser;  // chat APIs only
  std::optional<StopMatcher> stop;
  std::string utf8_pending;
  std::vector<std::string> call_ids;       // by call index
  bool forced = false;                     // tool_choice opener injected
  bool finished = false;
  FinishReason pending_finish = FinishReason::stop;
  std::string stop_sequence;
  std::string generated_text;              // for --trace
  Clock::time_point t_start, t_decode;
};

static int64_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

EngineWorker::EngineWorker(Engine& engine, const WorkerOptions& opts, SharedReplayStore& replay,
                           Metrics& metrics, std::FILE* trace)
    : engine_(engine), opts_(opts), replay_(replay), metrics_(metrics), trace_(trace) {
  if (opts_.n_sessions < 1) opts_.n_sessions = 1;
  if (opts_.prefill_step < 1) opts_.prefill_step = 512;
  for (int i = 0; i < opts_.n_sessions; ++i) slots_.push_back(std::make_unique<Slot>());
  mem_ = engine_.memory_report();
}

EngineWorker::~EngineWorker() { stop(std::chrono::milliseconds(0)); }

void EngineWorker::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
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

void EngineWorker::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_.empty()) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      }
      if (stopping_ && Clock::now() >= drain_deadline_) hard_stop_ = true;
      if (stopping_ && queue_.empty() && active_.empty()) break;
      if (hard_stop_) {
        for (auto& j : queue_) j->cancel = true;
      }
    }
    assign_jobs();
    for (auto& a : active_) {
      if (hard_stop_) a->job->cancel = true;
      if (!step(*a)) a->finished = true;
    }
    std::erase_if(active_, [](const std::unique_ptr<Active>& a) { return a->finished; });
    metrics_.set_active(static_cast<int64_t>(active_.size()));
  }
}

void EngineWorker::assign_jobs() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
      const bool idle = std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return !s->busy; });
      if (!idle && !queue_.front()->cancel) return;
      job = queue_.front();
      queue_.pop_front();
      metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
    }
    auto a = std::make_unique<Active>();
    a->job = job;
    a->t_start = Clock::now();
    if (job->cancel) {
      finish(*a, FinishReason::cancelled, cancelled("request cancelled while queued"));
      continue;
    }
    // The idle slot that saves the most prefill without throwing away much of another conversation:
    // reused tokens count fully, live tokens the rewind would discard count half against. With one
    // session this is just "the" session; with several, an empty slot beats evicting a conversation
    // that only shares the template's first tokens.
    Slot* best = nullptr;
    int64_t best_lcp = 0;
    double best_score = 0;
    for (auto& s : slots_) {
      if (s->busy) continue;
      const int64_t lcp = s->session ? common_prefix(s->session->tokens(), job->prompt) : 0;
      const int64_t lost = s->session ? s->session->position() - lcp : 0;
      const double score = static_cast<double>(lcp) - 0.5 * static_cast<double>(lost);
      if (!best || score > best_score) {
        best = s.get();
        best_lcp = lcp;
        best_score = score;
      }
    }
    a->slot = best;
    best->busy = true;
    if (!best->session) {
      auto s = engine_.new_session();
      if (!s.ok()) {
        best->busy = false;
        a->slot = nullptr;
        finish(*a, FinishReason::error, s.status());
        continue;
      }
      best->session = std::move(s).value();
    }
    Session& session = *best->session;
    const int64_t pos = session.position();
    int64_t keep = std::max<int64_t>(best_lcp, 0);
    if (keep < pos) {
      Status st = session.rewind(keep);
      if (!st.ok()) {  // cannot rewind here: start this slot over from an empty timeline
        auto s = engine_.new_session();
        if (!s.ok()) {
          best->busy = false;
          best->session.reset();
          a->slot = nullptr;
          finish(*a, FinishReason::error, s.status());
          continue;
        }
        best->session = std::move(s).value();
        keep = 0;
      }
    }
    // Identical prompt already evaluated: logits are current. A prompt fully inside the live tokens
    // was rewound to its end above, which restores exactly its logits.
    a->prefilled = static_cast<size_t>(keep);
    a->cached = keep;
    const int64_t room = best->session->max_context() - static_cast<int64_t>(job->prompt.size());
    a->max_new = std::min<int64_t>(job->req.max_tokens.value_or(opts_.default_max_tokens), room);
    a->sampler.emplace(make_sampler(job->req.sampling));
    a->stop.emplace(job->req.stop);
    if (!job->req.raw_completion) {
      chat::ParserOptions po;
      po.flavor = opts_.flavor;
      po.thinking = job->req.think != chat::ThinkMode::none;
      po.tools_enabled = job->req.tools_enabled;
      a->parser.emplace(po);
    }
    metrics_.add_prompt_tokens(static_cast<int64_t>(job->prompt.size()), a->cached);
    GenEvent ev;
    ev.kind = GenEventKind::started;
    ev.prefill_done = keep;
    ev.prefill_total = static_cast<int64_t>(job->prompt.size());
    ev.usage.prompt_tokens = ev.prefill_total;
    ev.usage.cached_tokens = keep;
    job->events.push(std::move(ev));
    if (trace_) {
      std::fprintf(trace_, "=== request %llu (%s, model %s) prompt %zu tokens, live %lld, reused %lld, prefill %lld\n%s\n",
                   static_cast<unsigned long long>(job->id), api_kind_name(job->req.api), job->req.model.c_str(),
                   job->prompt.size(), static_cast<long long>(pos), static_cast<long long>(keep),
                   static_cast<long long>(job->prompt.size() - keep), job->rendered.c_str());
      std::fflush(trace_);
    }
    active_.push_back(std::move(a));
  }
}

namespace {
struct CancelCtx {
  const Job* job;
  const std::atomic<bool>* hard_stop;
};
bool should_cancel(void* user) {
  auto* c = static_cast<CancelCtx*>(user);
  return c->job->cancel.load() || c->hard_stop->load() || Clock::now() >= c->job->deadline;
}
}  // namespace

bool EngineWorker::step(Active& a) {
  Job& job = *a.job;
  if (job.cancel || hard_stop_) {
    finish(a, FinishReason::cancelled, cancelled(hard_stop_ ? "server shutting down" : "client disconnected"));
    return false;
  }
  if (Clock::now() >= job.deadline) {
    finish(a, FinishReason::error, unavailable("request timed out"));
    return false;
  }
  Session& session = *a.slot->session;
  CancelCtx cctx{&job, &hard_stop_};
  EvalOptions eo;
  eo.should_cancel = &should_cancel;
  eo.cancel_user = &cctx;

  if (!a.decoding) {
    if (a.prefilled < job.prompt.size()) {
      const size_t n = std::min<size_t>(opts_.prefill_step, job.prompt.size() - a.prefilled);
      const auto t0 = Clock::now();
      Status st = session.eval(std::span<const TokenId>(job.prompt).subspan(a.prefilled, n), eo);
      if (!st.ok()) {
        if (st.code() == StatusCode::cancelled) {
          finish(a, job.cancel ? FinishReason::cancelled : FinishReason::error,
                 job.cancel ? st : unavailable("request timed out or server shutting down during prefill"));
        } else {
          finish(a, FinishReason::error, st.with_context("prefill failed"));
        }
        return false;
      }
      metrics_.add_prefill(static_cast<int64_t>(n), std::chrono::duration<double>(Clock::now() - t0).count());
      a.prefilled += n;
      GenEvent ev;
      ev.kind = GenEventKind::prefill;
      ev.prefill_done = static_cast<int64_t>(a.prefilled);
      ev.prefill_total = static_cast<int64_t>(job.prompt.size());
      job.events.push(std::move(ev));
      if (a.prefilled < job.prompt.size()) return true;
    }
    a.decoding = true;
    a.t_decode = Clock::now();
    if (a.max_new <= 0) {
      finish(a, FinishReason::length);
      return false;
    }
  }

  const Tokenizer& tok = engine_.tokenizer();
  // tool_choice required/named: once the answer phase begins, write the DSML opener ourselves.
  if (job.req.tool_force.required && !a.forced && a.parser && a.parser->state() == chat::ParseState::content) {
    a.forced = true;
    std::string text = "\n\n<｜DSML｜tool_calls>\n";
    if (!job.req.tool_force.name.empty()) text += "<｜DSML｜invoke name=\"" + job.req.tool_force.name + "\">\n";
    EncodeOptions enc;
    enc.parse_special = true;
    std::vector<TokenId> ids = tok.encode(text, enc);
    Status st = session.eval(ids, eo);
    if (!st.ok()) {
      finish(a, st.code() == StatusCode::cancelled ? FinishReason::cancelled : FinishReason::error, st);
      return false;
    }
    a.generated += static_cast<int64_t>(ids.size());
    a.generated_text += text;
    std::vector<chat::ParseEvent> evs;
    a.parser->feed(text, evs);
    for (auto& e : evs) {
      GenEvent ev;
      if (e.kind == chat::ParseEventKind::call_begin) {
        auto id = chat::new_tool_call_id(job.req.api == ApiKind::anthropic_messages ? chat::IdStyle::anthropic
                                                                                     : chat::IdStyle::openai);
        a.call_ids.resize(std::max(a.call_ids.size(), e.index + 1));
        a.call_ids[e.index] = id.ok() ? *id : random_id("call_");
        ev.kind = GenEventKind::call_begin;
        ev.index = e.index;
        ev.call.id = a.call_ids[e.index];
        ev.call.name = e.text;
        job.events.push(std::move(ev));
      }
    }
    return true;
  }

  std::span<const float> logits = session.logits();
  const TokenId t = a.sampler->sample(logits);
  if (t == tok.eos_id()) {
    finish(a, FinishReason::stop);
    return false;
  }
  a.generated++;
  if (a.parser && a.parser->state() == chat::ParseState::reasoning) a.reasoning_tokens++;
  std::string bytes = tok.token_bytes(t);
  a.generated_text += bytes;
  if (job.req.logprobs_top >= 0) {
    GenEvent ev;
    ev.kind = GenEventKind::token;
    ev.token.text = bytes;
    ev.token.lp = token_logprob(logits, t, job.req.logprobs_top);
    for (const auto& alt : ev.token.lp.top) ev.token.top_text.push_back(tok.token_bytes(alt.id));
    job.events.push(std::move(ev));
  }

  a.utf8_pending += bytes;
  const size_t ready = utf8_complete_prefix(a.utf8_pending);
  std::string piece = a.utf8_pending.substr(0, ready);
  a.utf8_pending.erase(0, ready);
  bool done = false;
  FinishReason reason = FinishReason::stop;
  auto emit_content = [&](std::string text) {
    std::string out = a.stop->push(text);
    if (!out.empty()) {
      GenEvent ev;
      ev.kind = GenEventKind::content;
      ev.text = std::move(out);
      job.events.push(std::move(ev));
    }
    if (a.stop->hit()) {
      done = true;
      reason = FinishReason::stop;
      a.stop_sequence = a.stop->matched();
    }
  };
  if (!piece.empty()) {
    if (!a.parser) {
      emit_content(piece);
    } else {
      std::vector<chat::ParseEvent> evs;
      a.parser->feed(piece, evs);
      for (auto& e : evs) {
        if (done) break;
        GenEvent ev;
        switch (e.kind) {
          case chat::ParseEventKind::reasoning:
            ev.kind = GenEventKind::reasoning;
            ev.text = std::move(e.text);
            job.events.push(std::move(ev));
            break;
          case chat::ParseEventKind::content:
            emit_content(std::move(e.text));
            break;
          case chat::ParseEventKind::call_begin: {
            emit_content(a.stop->flush());
            auto id = chat::new_tool_call_id(job.req.api == ApiKind::anthropic_messages ? chat::IdStyle::anthropic
                                                                                         : chat::IdStyle::openai);
            a.call_ids.resize(std::max(a.call_ids.size(), e.index + 1));
            a.call_ids[e.index] = id.ok() ? *id : random_id("call_");
            ev.kind = GenEventKind::call_begin;
            ev.index = e.index;
            ev.call.id = a.call_ids[e.index];
            ev.call.name = e.text;
            job.events.push(std::move(ev));
            break;
          }
          case chat::ParseEventKind::call_args:
            ev.kind = GenEventKind::call_args;
            ev.index = e.index;
            ev.text = std::move(e.text);
            job.events.push(std::move(ev));
            break;
          case chat::ParseEventKind::call_end:
            ev.kind = GenEventKind::call_end;
            ev.index = e.index;
            ev.call = std::move(e.call);
            if (e.index < a.call_ids.size()) ev.call.id = a.call_ids[e.index];
            job.events.push(std::move(ev));
            break;
        }
      }
      // The tool block closed: ds4 stops right after </｜DSML｜tool_calls> without waiting for EOS.
      if (!done && a.parser->state() == chat::ParseState::done) {
        done = true;
        reason = FinishReason::tool_calls;
      }
    }
  }
  if (done) {
    finish(a, reason);
    return false;
  }
  if (a.generated >= a.max_new) {
    finish(a, FinishReason::length);
    return false;
  }
  const TokenId one[1] = {t};
  Status st = session.eval(one, eo);
  if (!st.ok()) {
    finish(a, st.code() == StatusCode::cancelled && job.cancel ? FinishReason::cancelled : FinishReason::error,
           st.with_context("decode failed"));
    return false;
  }
  return true;
}

void EngineWorker::finish(Active& a, FinishReason reason, Status error) {
  Job& job = *a.job;
  auto push_content = [&](std::string text) {
    if (text.empty()) return;
    GenEvent ev;
    ev.kind = GenEventKind::content;
    ev.text = std::move(text);
    job.events.push(std::move(ev));
  };
  if (reason != FinishReason::cancelled && reason != FinishReason::error && a.stop) {
    // End of generation: release withheld text (an incomplete UTF-8 tail becomes U+FFFD).
    std::string tail = std::exchange(a.utf8_pending, {});
    if (!tail.empty()) tail = "\xEF\xBF\xBD";
    bool stop_hit = a.stop->hit();
    if (a.parser) {
      std::vector<chat::ParseEvent> evs;
      if (!tail.empty() && !stop_hit) a.parser->feed(tail, evs);
      chat::ParsedMessage parsed = a.parser->finish(evs);
      for (auto& e : evs) {
        if (stop_hit) break;
        GenEvent ev;
        if (e.kind == chat::ParseEventKind::reasoning) {
          ev.kind = GenEventKind::reasoning;
          ev.text = std::move(e.text);
          job.events.push(std::move(ev));
        } else if (e.kind == chat::ParseEventKind::content) {
          push_content(a.stop->push(e.text));
          stop_hit = a.stop->hit();
        } else if (e.kind == chat::ParseEventKind::call_end) {
          ev.kind = GenEventKind::call_end;
          ev.index = e.index;
          ev.call = std::move(e.call);
          if (e.index < a.call_ids.size()) ev.call.id = a.call_ids[e.index];
          job.events.push(std::move(ev));
        }
      }
      if (!parsed.calls.empty()) {
        if (reason == FinishReason::stop && !stop_hit) reason = FinishReason::tool_calls;
        if (opts_.exact_dsml_replay && !parsed.raw_dsml.empty()) {
          std::vector<std::string> ids;
          for (size_t i = 0; i < parsed.calls.size() && i < a.call_ids.size(); ++i) ids.push_back(a.call_ids[i]);
          replay_.remember(ids, parsed.raw_dsml);
        }
      }
    } else if (!tail.empty()) {
      push_content(a.stop->push(tail));
    }
    push_content(a.stop->flush());
    if (a.stop->hit()) a.stop_sequence = a.stop->matched();
  }
  GenEvent done;
  done.kind = GenEventKind::done;
  done.finish = reason;
  done.stop_sequence = a.stop_sequence;
  done.usage.prompt_tokens = static_cast<int64_t>(job.prompt.size());
  done.usage.cached_tokens = a.cached;
  done.usage.completion_tokens = a.generated;
  done.usage.reasoning_tokens = a.reasoning_tokens;
  done.error = std::move(error);
  if (a.decoding)
    metrics_.add_decode(a.generated, std::chrono::duration<double>(Clock::now() - a.t_decode).count());
  metrics_.count_finish(finish_reason_name(reason));
  if (reason == FinishReason::cancelled) metrics_.count_cancelled();
  if (trace_) {
    std::fprintf(trace_, "=== request %llu finished: %s, %lld tokens%s%s\n%s\n",
                 static_cast<unsigned long long>(job.id), finish_reason_name(reason),
                 static_cast<long long>(a.generated), done.error.ok() ? "" : ", ",
                 done.error.ok() ? "" : done.error.to_string().c_str(), a.generated_text.c_str());
    std::fflush(trace_);
  }
  job.events.push(std::move(done));
  if (a.slot) a.slot->busy = false;
  a.finished = true;
  {
    MemoryReport m = engine_.memory_report();
    std::lock_guard<std::mutex> lock(mu_);
    mem_ = std::move(m);
  }
}

}  // namespace ds4::server
