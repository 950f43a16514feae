// The batcher (see batcher.h): the paths a call takes through it. The state its mutex guards and the books kept
// around the pure decisions (admission.h, lane_choice.h, batch_policy.h) are in batcher_state.h.
#include "batcher.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "admission.h"
#include "batcher_state.h"
#include "errors.h"
#include "lane_choice.h"

namespace ortserve {

namespace {

InferResult Failed(Code code, std::string message) {
  InferResult result;
  result.code = code;
  result.message = std::move(message);
  return result;
}

InferResult Answered(const ortserve::Refusal& refusal) {
  InferResult result;
  result.code = refusal.code;
  result.message = refusal.message;
  result.retry_after_s = refusal.retry_after_s;
  return result;
}

// A call's time budget: the deadline it sent, else `default_s` from now (0: none). One rule for every transport.
TimeBudget BudgetOf(std::optional<Clock::time_point> deadline, double default_s, Clock::time_point now) {
  if (deadline || default_s <= 0) return {deadline, false};
  return {now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(default_s)), true};
}

std::vector<int> Lengths(const std::vector<std::vector<int64_t>>& ids) {
  std::vector<int> lengths;
  lengths.reserve(ids.size());
  for (const auto& row : ids) lengths.push_back(static_cast<int>(row.size()));
  return lengths;
}

// Each text's ids and its tokens as the entities read them.
void EncodeTokens(const WordPiece& tokenizer, const std::vector<std::string_view>& texts,
                  std::vector<std::vector<int64_t>>& ids, TokenRows& tokens) {
  tokens.spans.assign(texts.size(), {});
  tokens.chars_read.assign(texts.size(), 0);
  std::vector<WordPieceSpan> spans;
  for (size_t i = 0; i < texts.size(); ++i) {
    tokenizer.EncodeWithSpans(texts[i], ids[i], spans, tokens.chars_read[i]);
    tokens.spans[i].reserve(spans.size());
    for (const WordPieceSpan& span : spans) {
      tokens.spans[i].push_back({span.start, span.end, span.is_subword != 0, span.special != 0});
    }
  }
}

}  // namespace

Batcher::Batcher(std::string model, std::string version, TextModel text_model, BatcherSettings settings,
                 std::shared_ptr<Lanes> lanes, std::shared_ptr<EventSink> events)
    : model_(std::move(model)),
      version_(std::move(version)),
      tokenizes_(text_model.tokenizer != nullptr),
      state_(std::make_unique<State>()) {
  settings.policy.Validate();
  if (settings.engine_concurrency < 1) throw OptionError("engine_concurrency must be >= 1");
  if (!(settings.interactive_lane_s >= 0)) throw OptionError("interactive_lane_ms must be >= 0");
  if (settings.max_queue_items < 1) throw OptionError("max_queue_items must be >= 1");
  if (settings.default_timeout_s < 0) throw OptionError("default_timeout_s must be >= 0");
  if (settings.bulk_min_texts < 0) throw OptionError("bulk_min_texts must be >= 0");
  if (text_model.wide == nullptr) throw OptionError("a batcher needs a wide engine");
  if (text_model.columns < 1) throw OptionError("columns must be >= 1");
  if (text_model.output.empty()) throw OptionError("a batcher needs the name of the model's output");
  if (!lanes || !events) throw OptionError("a batcher needs lanes and an event sink");
  State& s = *state_;
  s.model_name = model_;
  s.version_name = version_;
  s.model = std::move(text_model);
  s.settings = settings;
  s.limits = AdmissionLimits{settings.max_queue_items};
  s.lane_config.engine_concurrency = settings.engine_concurrency;
  // Lanes only pay when runs go side by side; with one at a time the wide session does everything.
  s.lane_config.has_narrow = s.model.narrow != nullptr && settings.engine_concurrency > 1;
  s.lane_config.lanes = lanes->lanes() >= settings.engine_concurrency ? settings.engine_concurrency : 0;
  s.lane_config.queue_behind_at = static_cast<size_t>(settings.policy.sort_window ? settings.policy.sort_window
                                                                                  : settings.policy.max_batch_size);
  s.lane_load.assign(static_cast<size_t>(s.lane_config.lanes), 0);
  s.lanes = std::move(lanes);
  s.events = std::move(events);
}

Batcher::~Batcher() { Close(); }

CallHandle Batcher::Submit(const std::vector<std::string_view>& texts, std::optional<Clock::time_point> deadline,
                           InferDone done, bool may_run_here, const std::vector<std::string_view>& pairs,
                           std::optional<bool> bulk, TokenRows* tokens) {
  return SubmitTexts(texts, deadline, std::move(done), may_run_here, pairs, bulk, tokens, /*shadow=*/false);
}

CallHandle Batcher::SubmitShadow(const std::vector<std::string_view>& texts,
                                 const std::vector<std::string_view>& pairs,
                                 std::optional<Clock::time_point> deadline, TokenRows* tokens, InferDone done) {
  return SubmitTexts(texts, deadline, std::move(done), /*may_run_here=*/false, pairs, /*bulk=*/true, tokens,
                     /*shadow=*/true);
}

CallHandle Batcher::SubmitTexts(const std::vector<std::string_view>& texts,
                                std::optional<Clock::time_point> deadline, InferDone done, bool may_run_here,
                                const std::vector<std::string_view>& pairs, std::optional<bool> bulk,
                                TokenRows* tokens, bool shadow) {
  State& s = *state_;
  if (!pairs.empty() && pairs.size() != texts.size()) {
    done(Failed(Code::kInternal, "Submit: " + std::to_string(texts.size()) + " texts and " +
                                     std::to_string(pairs.size()) + " second texts"));
    return nullptr;
  }
  if (!pairs.empty() && tokens != nullptr) {
    done(Failed(Code::kInternal, "Submit: token spans are for single texts, not pairs"));
    return nullptr;
  }
  if (s.model.tokenizer == nullptr && !texts.empty()) {
    done(Failed(Code::kInternal,
                "model version " + version_ + " has no native tokenizer: its texts must come as token ids"));
    return nullptr;
  }
  const int n = static_cast<int>(texts.size());
  const TimeBudget budget = BudgetOf(deadline, s.settings.default_timeout_s, Clock::now());
  std::optional<ortserve::Refusal> refusal;
  {
    // At one token a text: under overload a refused call costs no tokenizing.
    std::lock_guard<std::mutex> lock(s.mutex);
    refusal = s.Check(n, n, budget, s.IsBulk(n, bulk), Clock::now());
    if (!refusal && shadow && s.ShadowFull(n)) refusal = ortserve::Refusal{Code::kResourceExhausted, kShadowFull, 0};
    if (!refusal) ++s.submitting;
  }
  if (refusal) {
    done(Answered(*refusal));
    return nullptr;
  }
  const Clock::time_point started = Clock::now();
  std::vector<std::vector<int64_t>> ids(texts.size());
  std::vector<int> seconds;
  if (tokens != nullptr) {
    EncodeTokens(*s.model.tokenizer, texts, ids, *tokens);
  } else if (pairs.empty()) {
    for (size_t i = 0; i < texts.size(); ++i) s.model.tokenizer->Encode(texts[i], ids[i]);
  } else {
    seconds.resize(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) seconds[i] = s.model.tokenizer->EncodePair(texts[i], pairs[i], ids[i]);
  }
  const double tokenize_s = std::chrono::duration<double>(Clock::now() - started).count();
  return Enqueue(std::move(ids), std::move(seconds), budget, bulk, std::move(done), tokenize_s, may_run_here,
                 /*submitting=*/true, shadow);
}

CallHandle Batcher::SubmitIds(std::vector<std::vector<int64_t>> ids, std::optional<Clock::time_point> deadline,
                              InferDone done, double tokenize_s, std::vector<int> seconds,
                              std::optional<bool> bulk) {
  return SubmitRows(std::move(ids), std::move(seconds), deadline, std::move(done), tokenize_s, bulk,
                    /*shadow=*/false);
}

CallHandle Batcher::SubmitShadowIds(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds,
                                    std::optional<Clock::time_point> deadline, InferDone done) {
  return SubmitRows(std::move(ids), std::move(seconds), deadline, std::move(done), 0, /*bulk=*/true,
                    /*shadow=*/true);
}

CallHandle Batcher::SubmitRows(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds,
                               std::optional<Clock::time_point> deadline, InferDone done, double tokenize_s,
                               std::optional<bool> bulk, bool shadow) {
  if (!seconds.empty() && seconds.size() != ids.size()) {
    done(Failed(Code::kInternal, "SubmitIds: " + std::to_string(ids.size()) + " rows and " +
                                     std::to_string(seconds.size()) + " second-text starts"));
    return nullptr;
  }
  int empty_rows = 0;
  for (auto& row : ids) {
    if (!row.empty()) continue;
    row.push_back(state_->model.pad_id);  // the engine needs one token per row
    ++empty_rows;
  }
  return Enqueue(std::move(ids), std::move(seconds), BudgetOf(deadline, state_->settings.default_timeout_s,
                 Clock::now()), bulk, std::move(done), tokenize_s, /*may_run_here=*/false, /*submitting=*/false,
                 shadow, empty_rows);
}

CallHandle Batcher::Enqueue(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds,
                            TimeBudget budget, std::optional<bool> bulk, InferDone done, double tokenize_s,
                            bool may_run_here, bool submitting, bool shadow, int empty_rows) {
  State& s = *state_;
  const int n = static_cast<int>(ids.size());
  const std::vector<int> lengths = Lengths(ids);
  int64_t read = -empty_rows;
  for (int length : lengths) read += length;
  const int64_t tokens = CallTokens(lengths, s.settings.policy, s.model.buckets);
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->deadline = budget.deadline;
  call->default_budget = budget.server_default;
  call->bulk = shadow || s.IsBulk(n, bulk);
  call->shadow = shadow;
  const Clock::time_point now = Clock::now();

  Answers answers;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (submitting) --s.submitting;
  std::optional<InferResult> answer;
  if (std::optional<ortserve::Refusal> refusal = s.Check(n, tokens, budget, call->bulk, now)) {
    answer = Answered(*refusal);
  } else if (shadow && s.ShadowFull(n)) {
    answer = Failed(Code::kResourceExhausted, kShadowFull);
  } else if (n == 0) {
    answer = InferResult{};  // nothing to run: an empty OK answer
    answer->columns = s.model.columns;
  }
  if (answer) {
    answer->tokenize_s = tokenize_s;
    if (answer->code == Code::kOk) answer->tokens = read;
    call->finished = true;
    if (s.Idle()) s.idle.notify_all();
    lock.unlock();
    call->done(std::move(*answer));  // on the caller's thread, no lock held
    return nullptr;
  }
  if (!call->bulk) s.interactive_at = now;
  InferResult& result = call->result;
  result.tokenize_s = tokenize_s;
  result.tokens = read;
  result.rows = n;
  result.columns = s.model.columns;
  result.logits.assign(static_cast<size_t>(n) * static_cast<size_t>(s.model.columns), 0.0f);
  call->remaining = n;
  std::optional<Session> lone;
  if (s.queued_texts == 0 && !call->bulk) lone = s.Next(/*queued=*/false);  // bulk runs batch by batch
  if (lone) {
    s.Start(*lone, tokens);
    auto self = shared_from_this();
    const bool narrow = *lone == Session::kNarrow;
    if (may_run_here && !narrow && s.lanes->ClaimCallerRun()) {
      // Saves waking a sleeping wide thread on an idle vCPU for every lone call (0.18 ms at c=1, tiny model).
      lock.unlock();
      s.RunAlone(self, call, ids, seconds, narrow, tokens, /*on_caller=*/true);
      return call;
    }
    auto shared_ids = std::make_shared<std::vector<std::vector<int64_t>>>(std::move(ids));
    auto shared_seconds = std::make_shared<std::vector<int>>(std::move(seconds));
    State* state = &s;
    if (!s.lanes->Post(-1, [state, self, call, shared_ids, shared_seconds, narrow, tokens] {
          state->RunAlone(self, call, *shared_ids, *shared_seconds, narrow, tokens, /*on_caller=*/false);
        })) {
      s.Stop(tokens);  // the lanes stopped: the server is going down
      s.Fail(call, Code::kUnavailable, kShuttingDown, answers);
    }
  } else {
    const double enqueued_at = Seconds(now);
    for (int row = 0; row < n; ++row) {
      const int second = seconds.empty() ? 0 : seconds[static_cast<size_t>(row)];
      s.pending.push_back(Item{call, row, std::move(ids[static_cast<size_t>(row)]), enqueued_at, second});
    }
    s.queued_texts += n;
    for (int length : lengths) s.queued_tokens += length;
    if (call->bulk) {
      s.queued_bulk += n;
      for (int length : lengths) s.queued_bulk_tokens += length;
    }
    if (call->shadow) s.queued_shadow += n;
    s.Dispatch(shared_from_this(), answers);
  }
  if (s.Idle()) s.idle.notify_all();
  lock.unlock();
  Deliver(answers);
  return call;
}

const std::shared_ptr<EventSink>& Batcher::events() const { return state_->events; }

std::optional<InferResult> Batcher::Refusal(int n, std::optional<Clock::time_point> deadline,
                                            std::optional<bool> bulk) const {
  std::optional<ortserve::Refusal> refusal;
  {
    const Clock::time_point now = Clock::now();
    const TimeBudget budget = BudgetOf(deadline, state_->settings.default_timeout_s, now);
    std::lock_guard<std::mutex> lock(state_->mutex);
    refusal = state_->Check(n, n, budget, state_->IsBulk(n, bulk), now);
  }
  if (!refusal) return std::nullopt;
  return Answered(*refusal);
}

void Batcher::Cancel(const CallHandle& call) {
  if (!call) return;
  State& s = *state_;
  Answers answers;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.Fail(call, Code::kCancelled, kCancelled, answers);
  }
  Deliver(answers);
}

void Batcher::Close() {
  State& s = *state_;
  Answers answers;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.closed) {
    s.closed = true;
    s.FailAll(s.pending, Code::kUnavailable, kShuttingDown, answers);  // empties the queue
  }
  lock.unlock();
  Deliver(answers);
  lock.lock();
  s.idle.wait(lock, [&] { return s.Idle(); });
}

int Batcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->queued_texts;
}

double Batcher::tokens_per_s() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->throughput.per_s();
}

}  // namespace ortserve
