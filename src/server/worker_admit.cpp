// worker_admit.cpp — admission of queued jobs (first come, first served): a free session slot
// (--max-sessions) and room in the KV budget (kv::decide_admission; idle sessions are evicted first),
// then the cheapest start for the prompt:
//   * an idle session whose live tokens share a prefix with the prompt, rewound to it — free when the
//     rewind is short (the engine's rings keep the last max_step_tokens − 1 tokens' inputs), a full
//     replay of the kept prefix otherwise;
//   * a saved state from the cross-session prefix cache (Session::restore), then the prompt's rest;
//   * an empty session.
// It also picks the prompt positions this job saves into the prefix cache while prefilling: the
// longest block boundary it shares with a cached prefix (the branch point: a system prompt two users
// share) and the last block boundary of its prompt (the next turn of the same conversation resumes there).
// Deliberately not here: stepping (worker.cpp), tokens and streaming (worker_token.cpp).
#include <algorithm>

#include "server/sampler.h"
#include "server/worker_state.h"

namespace ds4::server {

using Clock = WorkerClock;

namespace {
int64_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}
}  // namespace

void EngineWorker::count_wait(const Job& job) {
  if (job.id == last_waiting_job_) return;  // once per job, not once per step
  last_waiting_job_ = job.id;
  ++batch_.admission_waits;
}

void EngineWorker::free_slot(Slot* slot) {
  // An idle session evicted for memory: ds4's `evict` save of its timeline first.
  if (opts_.disk_cache && slot->session && !slot->busy)
    opts_.disk_cache->save_before_discard(*slot->session, slot->disk, 0);
  std::erase_if(slots_, [slot](const std::unique_ptr<Slot>& s) { return s.get() == slot; });
}

void EngineWorker::assign_jobs() {
  bool changed = false;
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      job = queue_.front();
    }
    auto pop = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
    };
    auto a = std::make_unique<Active>();
    a->job = job;
    a->t_start = Clock::now();
    if (job->cancel || (job->client_gone && job->client_gone())) {
      job->cancel = true;
      pop();
      finish(*a, FinishReason::cancelled, cancelled("request cancelled while queued"));
      continue;
    }
    const int64_t prompt_n = static_cast<int64_t>(job->prompt.size());
    const int64_t ctx = engine_.info().max_context > 0 ? engine_.info().max_context : prompt_n + 1;
    a->max_new = std::min<int64_t>(job->req.max_tokens.value_or(opts_.default_max_tokens), ctx - prompt_n);
    a->reserve_bytes = kv_cost_.bytes_for(prompt_n + std::max<int64_t>(a->max_new, 0));

    // Candidate starts, scored by prompt tokens still to compute plus half the tokens of another
    // conversation the start throws away (an empty session beats evicting a conversation that only
    // shares the template's first tokens). A long rewind replays the kept prefix, so it keeps nothing.
    const int64_t cheap_rewind = std::max<int64_t>(engine_.max_step_tokens() - 2, 0);
    int64_t running = 0;
    uint64_t reserved = 0;
    for (const auto& b : active_)
      if (!b->finished) {
        ++running;
        reserved += b->reserve_bytes;
      }
    const bool can_grow = static_cast<int>(slots_.size()) < max_sessions_;
    kv::PrefixLookup hit;
    if (prefix_cache_.enabled()) hit = prefix_cache_.lookup(job->prompt, prompt_n);
    Slot* target = nullptr;  // nullptr: a new session
    int64_t keep = 0;
    bool use_hit = false;
    double best = can_grow ? static_cast<double>(prompt_n - hit.hit_tokens) : 1e300;
    use_hit = can_grow && hit.hit_tokens > 0;
    std::vector<kv::IdleSession> idle;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot* s = slots_[i].get();
      if (s->busy) continue;
      const int64_t pos = s->session ? s->session->position() : 0;
      idle.push_back({i, s->session ? kv_bytes(s->session->memory()) : 0, s->last_used});
      int64_t lcp = s->session ? common_prefix(s->session->tokens(), job->prompt) : 0;
      if (pos - lcp > cheap_rewind) lcp = 0;
      const double lost = 0.5 * static_cast<double>(pos - lcp);
      const double live_cost = static_cast<double>(prompt_n - lcp) + lost;
      // Restoring into this slot discards all of it.
      const double hit_cost = hit.hit_tokens > 0 ? static_cast<double>(prompt_n - hit.hit_tokens) + 0.5 * static_cast<double>(pos)
                                                 : 1e300;
      const bool older = target && s->last_used < target->last_used;
      if (live_cost < best || (live_cost == best && older)) {
        best = live_cost;
        target = s;
        keep = lcp;
        use_hit = false;
      }
      if (hit_cost < best) {
        best = hit_cost;
        target = s;
        keep = 0;
        use_hit = true;
      }
    }
    if (!target && !can_grow) {  // every session is running: wait for one to finish
      count_wait(*job);
      break;
    }
    kv::AdmissionInput in;
    in.running = static_cast<int>(running);
    in.reserved_bytes = reserved;
    in.idle = idle;
    in.reuse_slot = target ? static_cast<int64_t>(std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) {
                                                    return s.get() == target;
                                                  }) - slots_.begin())
                           : -1;
    in.need_bytes = a->reserve_bytes;
    const kv::AdmitDecision d = kv::decide_admission(admission_, in);
    if (d.verdict == kv::AdmitVerdict::wait) {
      count_wait(*job);
      break;
    }
    pop();
    if (d.verdict == kv::AdmitVerdict::reject) {
      ++batch_.admission_rejects;
      finish(*a, FinishReason::error, invalid_argument(d.reason));
      continue;
    }
    // Evict idle sessions to make room (their slots go away; a new slot is made below if needed).
    std::vector<Slot*> gone;
    for (size_t idx : d.evict) gone.push_back(slots_[idx].get());
    for (Slot* g : gone) {
      free_slot(g);
      ++batch_.idle_evictions;
    }
    if (!target) {
      slots_.push_back(std::make_unique<Slot>());
      target = slots_.back().get();
    }
    changed = true;
    if (!start_job(*a, target, use_hit ? hit.hit_tokens : keep, use_hit ? hit.payload : nullptr)) continue;
    // Checkpoints to save while prefilling (only beyond what this job starts from).
    if (prefix_cache_.enabled()) {
      const int64_t B = prefix_cache_.block_tokens();
      const int64_t from = static_cast<int64_t>(a->prefilled);
      for (int64_t c : {hit.shared_tokens, (prompt_n / B) * B})
        if (c > from && c <= prompt_n && !prefix_cache_.contains(job->prompt, c) &&
            std::find(a->checkpoints.begin(), a->checkpoints.end(), c) == a->checkpoints.end())
          a->checkpoints.push_back(c);
      std::sort(a->checkpoints.begin(), a->checkpoints.end());
    }
    active_.push_back(std::move(a));
  }
  if (changed) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_.set_queue_depth(static_cast<int64_t>(queue_.size()));
  }
}

// Puts `a` on `slot`: the session starts from a restored prefix (payload), a kept live prefix, or
// empty. False (job finished with an error) when no session can be made.
bool EngineWorker::start_job(Active& a, Slot* slot, int64_t start_tokens, const std::vector<uint8_t>* payload) {
  Job& job = *a.job;
  a.slot = slot;
  slot->busy = true;
  DiskCache* disk = opts_.disk_cache;
  bool disk_done = false;  // admit() already ran for this job
  auto fresh = [&]() -> Status {
    slot->session.reset();
    slot->disk = {};
    auto s = engine_.new_session();
    if (!s.ok()) return s.status();
    slot->session = std::move(s).value();
    return Status::Ok();
  };
  const int64_t live = slot->session ? slot->session->position() : 0;
  int64_t keep = 0;
  Status st;
  if (!slot->session) st = fresh();
  if (st.ok() && payload) {
    if (disk) disk->save_before_discard(*slot->session, slot->disk, 0);
    slot->disk = {};
    SessionSnapshot snap;
    snap.bytes = *payload;
    if (slot->session->restore(snap).ok() && slot->session->position() == start_tokens) {
      keep = start_tokens;
      ++batch_.prefix_restores;
      batch_.prefix_restored_tokens += static_cast<uint64_t>(keep);
    } else {
      st = fresh();  // an unusable saved state is a miss, never a wrong answer
    }
  } else if (st.ok() && slot->session->position() > 0) {
    keep = start_tokens;
    if (disk) {
      disk_done = true;
      // Looks up a longer prefix on disk, saves the live tokens the rewind discards, rewinds, restores.
      keep = disk->admit(*slot->session, slot->disk, job.prompt, keep);
      if (slot->session->position() != keep) {
        st = fresh();
        keep = 0;
      }
    } else if (keep < live && !slot->session->rewind(keep).ok()) {
      st = fresh();
      keep = 0;
    }
  }
  // A new or restored session: the disk may still hold a longer prefix (and cold saves get planned).
  if (st.ok() && disk && !disk_done) {
    const int64_t got = disk->admit(*slot->session, slot->disk, job.prompt, keep);
    if (slot->session->position() == got) keep = got;
    else {
      st = fresh();
      keep = 0;
    }
  }
  if (!st.ok()) {
    slot->busy = false;
    free_slot(slot);
    a.slot = nullptr;
    finish(a, FinishReason::error, st);
    return false;
  }
  // Identical prompt already evaluated: logits are current (a rewind or restore to exactly the
  // prompt's end gives exactly its logits).
  a.prefilled = static_cast<size_t>(keep);
  a.cached = keep;
  a.sampler.emplace(make_sampler(job.req.sampling));
  // The runtime sampler's own greedy rule (temperature <= 0 or top_k 1: argmax, no RNG draw).
  a.greedy = (a.sampler->options().temperature <= 0.0f || a.sampler->options().top_k == 1) && job.req.logprobs_top < 0;
  a.stop.emplace(job.req.stop);
  if (!job.req.raw_completion) {
    chat::ParserOptions po;
    po.flavor = opts_.flavor;
    po.thinking = job.req.think != chat::ThinkMode::none;
    po.tools_enabled = job.req.tools_enabled;
    a.parser.emplace(po);
  }
  metrics_.add_prompt_tokens(static_cast<int64_t>(job.prompt.size()), a.cached);
  GenEvent ev;
  ev.kind = GenEventKind::started;
  ev.prefill_done = keep;
  ev.prefill_total = static_cast<int64_t>(job.prompt.size());
  ev.usage.prompt_tokens = ev.prefill_total;
  ev.usage.cached_tokens = keep;
  job.events.push(std::move(ev));
  if (trace_) {
    std::fprintf(trace_, "=== request %llu (%s, model %s) prompt %zu tokens, live %lld, reused %lld%s, prefill %lld\n%s\n",
                 static_cast<unsigned long long>(job.id), api_kind_name(job.req.api), job.req.model.c_str(),
                 job.prompt.size(), static_cast<long long>(live), static_cast<long long>(keep),
                 payload ? " (prefix cache)" : "", static_cast<long long>(job.prompt.size() - keep), job.rendered.c_str());
    std::fflush(trace_);
  }
  // A fully cached prompt goes straight to decoding.
  if (a.prefilled >= job.prompt.size()) {
    a.decoding = true;
    a.t_decode = Clock::now();
    if (a.max_new <= 0) {
      finish(a, FinishReason::length);
      return false;
    }
  }
  return true;
}

}  // namespace ds4::server
