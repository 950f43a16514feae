// The batcher: one version's queue, batches, runs and deadlines. Every ModelInfer reaches one, whichever front end
// received it: the native front end submits texts (tokenized here by the C++ WordPiece), the Python front end texts
// or token ids (a version on the HF tokenizer). One Batcher per loaded version; their runs share one Lanes.
//
//   auto call = batcher->Submit(texts, deadline, done);   // tokenizes here, admits or refuses, queues
//   auto call = batcher->SubmitIds(ids, deadline, done);  // already tokenized
//   batcher->Cancel(call);                                // the client went away: its texts leave the queue
//   batcher->Close();                                     // queued calls get UNAVAILABLE; waits running batches
//
// Admission (admission.h) counts a call's work as its runs will do it, once its texts are tokenized. A call admitted
// with nothing queued runs alone at once, on the session NextRun gives it (lane_choice.h), split into the runs
// SplitRows allows (RunSplit); anything queued runs in batches ChooseBatch picks (batch_policy.h), on a lane
// PickLane picks; a lane that finishes a batch picks its next one itself before answering the finished one.
// Texts whose deadline passed or whose call was cancelled never reach the engine. docs/architecture.md states the
// contract.
//
// Threads: Submit, SubmitIds, Cancel, Refusal and Close from any thread; runs on Lanes' threads (or the submitting
// one). One mutex per batcher guards its queue, its load and throughput and every admitted Call's progress; it is
// never held while an engine runs or a done callback is called.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batch_policy.h"
#include "call.h"
#include "engine_run.h"
#include "entities.h"
#include "events.h"
#include "lanes.h"

namespace ortserve {

// Defaults: service/config.Settings' (held equal by tests/service/test_settings_defaults.py).
struct BatcherSettings {
  BatchPolicy policy;
  int max_queue_items = 4096;
  double default_timeout_s = 600;  // the time budget of a call that sends no deadline; 0: none (admission.h)
  int bulk_min_texts = 256;       // a call of this many texts or more is bulk (batch_policy.h ChooseNext); 0: none
  int engine_concurrency = 2;
  // While an interactive call arrived within this many seconds, bulk runs leave one lane to the interactive class
  // (engine_concurrency >= 2): a query beside a bulk job finds a lane free instead of waiting for a bulk run; 0:
  // bulk runs take every lane.
  double interactive_lane_s = 1.0;
};

class Batcher : public std::enable_shared_from_this<Batcher> {
 public:
  // Throws OptionError for bad settings (BatchPolicy::Validate's messages, engine_concurrency >= 1, ...).
  Batcher(std::string model, std::string version, TextModel text_model, BatcherSettings settings,
          std::shared_ptr<Lanes> lanes, std::shared_ptr<EventSink> events);
  ~Batcher();

  // Tokenizes `texts` on the calling thread, then admits and queues them. `done` runs exactly once: on this
  // thread for a refusal, else on a lane/wide thread (or in Cancel/Close). Returns the handle for Cancel (nullptr
  // when answered already). A call that the queue would refuse at one token a text is refused before tokenizing.
  // `may_run_here`: a lone call on the wide session may run on the calling thread, before Submit returns (done
  // included), saving the wake of a sleeping wide thread; at most one such run per Lanes at a time, none while
  // they are paused or stopping. For callers whose thread may block for one run (the gRPC front end).
  // `pairs`: empty, or one second text per text (a cross-encoder's pairs: tokenized as one row each,
  // WordPiece::EncodePair, and counted as one row by admission and batching). `bulk`: the caller's priority
  // (DecodedCall::bulk); nullopt: bulk when the call has bulk_min_texts texts or more. `tokens`: a token
  // classifier's call, filled with each text's token spans (WordPiece::EncodeWithSpans) before Submit queues it,
  // so before `done` runs; no pairs with it.
  CallHandle Submit(const std::vector<std::string_view>& texts, std::optional<Clock::time_point> deadline,
                    InferDone done, bool may_run_here = false, const std::vector<std::string_view>& pairs = {},
                    std::optional<bool> bulk = std::nullopt, TokenRows* tokens = nullptr);
  // A shadow copy of a live call (call_path.h): the lowest class. Queued whatever the load, batched only while
  // nothing else of this version is pending (ChooseNext), its runs idle tasks on the lanes (Lanes::Post's `idle`:
  // they start only while the engine runs nothing else, any version's); refused at once (RESOURCE_EXHAUSTED, kShadowFull) when
  // shadow texts are queued and this call would take them past kShadowQueueRuns runs' worth (max_batch_size each
  // run), so a copy never holds memory or engine time the live calls need.
  // `tokens`: a token classifier's copy, filled with its token spans before it is queued (as Submit's).
  CallHandle SubmitShadow(const std::vector<std::string_view>& texts, const std::vector<std::string_view>& pairs,
                          std::optional<Clock::time_point> deadline, TokenRows* tokens, InferDone done);
  // SubmitShadow for a version on HF tokenizers: its copy's rows tokenized by Python (ShadowTokenize).
  CallHandle SubmitShadowIds(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds,
                             std::optional<Clock::time_point> deadline, InferDone done);
  static constexpr int kShadowQueueRuns = 4;
  // Submit for texts tokenized by the caller (`tokenize_s`: what that took, reported in the result). `seconds`:
  // empty, or per row where a pair's second text begins (engine_run.h Row).
  CallHandle SubmitIds(std::vector<std::vector<int64_t>> ids, std::optional<Clock::time_point> deadline,
                       InferDone done, double tokenize_s = 0, std::vector<int> seconds = {},
                       std::optional<bool> bulk = std::nullopt);
  // What Submit would answer at once for `n` texts of one token each with `deadline` as the queue stands, or
  // nullopt when it would admit them: a lower bound on the work, so that a caller that tokenizes elsewhere skips
  // that work for a call that would be refused anyway. Submit checks again, with the texts' tokens.
  std::optional<InferResult> Refusal(int n, std::optional<Clock::time_point> deadline,
                                     std::optional<bool> bulk = std::nullopt) const;
  // The call ended on the client's side: its queued texts leave the queue; done(CANCELLED) unless done already.
  void Cancel(const CallHandle& call);
  // Refuses new calls (UNAVAILABLE), answers queued ones UNAVAILABLE, waits for running batches (and for their
  // answers to have been delivered). Idempotent. Never call it from a done callback (it would wait for itself).
  void Close();

  int queue_depth() const;      // texts admitted, not yet in a running batch
  double tokens_per_s() const;  // admission's rate: padded tokens per busy second, 0 before any run ended
  const std::string& model() const { return model_; }
  const std::string& version() const { return version_; }
  // Its texts are tokenized here (the version's tokenizer is the C++ WordPiece); else they come as ids (SubmitIds).
  bool tokenizes() const { return tokenizes_; }
  const std::shared_ptr<EventSink>& events() const;  // where its runs and its shadow copies are reported

 private:
  struct State;  // the queue, the load, the throughput; guarded by its mutex (batcher.cc)

  // Submit's and SubmitShadow's body: tokenized here, then Enqueue.
  CallHandle SubmitTexts(const std::vector<std::string_view>& texts, std::optional<Clock::time_point> deadline,
                         InferDone done, bool may_run_here, const std::vector<std::string_view>& pairs,
                         std::optional<bool> bulk, TokenRows* tokens, bool shadow);
  // SubmitIds' and SubmitShadowIds' body: rows from the caller (an empty row gets the pad id), then Enqueue.
  CallHandle SubmitRows(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds,
                        std::optional<Clock::time_point> deadline, InferDone done, double tokenize_s,
                        std::optional<bool> bulk, bool shadow);

  // Admits `ids` (their tokens counted) and queues them or runs them alone, or answers at once. `submitting`: the
  // call was counted in State::submitting while it tokenized. `empty_rows`: rows that came empty and hold the pad id
  // (read as no tokens in InferResult::tokens).
  // `budget`: the call's (BudgetOf in batcher.cc).
  CallHandle Enqueue(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds, TimeBudget budget,
                     std::optional<bool> bulk, InferDone done, double tokenize_s, bool may_run_here,
                     bool submitting, bool shadow = false, int empty_rows = 0);

  const std::string model_;
  const std::string version_;
  const bool tokenizes_;
  std::unique_ptr<State> state_;
};

}  // namespace ortserve
