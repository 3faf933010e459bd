// worker_token.cpp — the per-job token path of the engine worker: sampling the next token from the
// session's logits (or taking the greedy token the step picked on the device), streaming it (UTF-8 completion, DSML tool-call parsing, stop sequences, logprobs),
// the tool_choice opener, and finishing a job (tail flush, usage, replay memory, metrics).
// Deliberately not here: evaluating tokens (worker.cpp batches them into one Engine::step).
#include <algorithm>
#include <utility>

#include "server/sampler.h"
#include "server/worker_state.h"

namespace ds4::server {

using Clock = WorkerClock;

// Decoding job with nothing to feed: sample (or force) what comes next. False when the job finished.
bool EngineWorker::next_feed(Active& a) {
  Job& job = *a.job;
  const Tokenizer& tok = engine_.tokenizer();
  // tool_choice required/named: once the answer phase begins, write the DSML opener ourselves.
  if (job.req.tool_force.required && !a.forced && a.parser && a.parser->state() == chat::ParseState::content) {
    a.forced = true;
    std::string text = "\n\n<｜DSML｜tool_calls>\n";
    if (!job.req.tool_force.name.empty()) text += "<｜DSML｜invoke name=\"" + job.req.tool_force.name + "\">\n";
    EncodeOptions enc;
    enc.parse_special = true;
    std::vector<TokenId> ids = tok.encode(text, enc);
    a.feed = ids;  // evaluated by the next steps, before anything is sampled again
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

  std::span<const float> logits;  // only read when the step left no greedy token (sampling, logprobs)
  TokenId t = a.greedy_next;
  if (!std::exchange(a.greedy_ready, false)) {
    logits = a.slot->session->logits();
    t = a.sampler->sample(logits);
  }
  if (t == tok.eos_id() && !job.req.ignore_eos) {
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
  a.feed.assign(1, t);
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
  if (a.slot) {
    a.slot->busy = false;
    a.slot->last_used = steps_;
  }
  a.finished = true;
  refresh_memory();
}

void EngineWorker::refresh_memory() {
  MemoryReport m = engine_.memory_report();
  std::lock_guard<std::mutex> lock(mu_);
  mem_ = std::move(m);
}

}  // namespace ds4::server
