// Shadow copies: a sample of a model's live calls copied to a version without weight (its shadow), whose answers
// are compared with the live ones (in Python: bundle/agreement.py) and never returned. For both front ends, next to
// the call path (call_path.h):
//
//   auto shadow = ShadowCopy::Of(routed, model, call, request_id);  // nullptr: this call is not copied
//   ... live done: if (shadow) shadow->Live(result);                // before the reply takes the values
//   batcher().Submit(live ...); if (shadow) shadow->Submit(call, deadline);  // after the live call
//
// The copy is the lowest class of the shadow version's batcher (Batcher::SubmitShadow): it never delays, refuses or
// changes the live call, and is dropped (counted by its status) when the engine has no room. Whichever answer comes
// second pushes one ShadowEvent into the shadow version's EventSink.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "call.h"
#include "call_path.h"
#include "entities.h"
#include "events.h"

namespace ortserve {

class ShadowCopy : public std::enable_shared_from_this<ShadowCopy> {
 public:
  // The copy of a call routed by the split (not pinned) when its bucket is in the model's shadow sample and the
  // shadow version is loaded, is not the one answering and takes the call (CheckOutputs); its lease is taken.
  // nullptr otherwise. `call`: as decoded, before any prompt.
  static std::shared_ptr<ShadowCopy> Of(const RoutedCall& routed, const std::string& model, const DecodedCall& call,
                                        std::string_view request_id);
  ~ShadowCopy();  // gives the lease back when never submitted
  ShadowCopy(const ShadowCopy&) = delete;
  ShadowCopy& operator=(const ShadowCopy&) = delete;

  // The live answer (its values copied; a token classifier's entities, from `tokens`, its token rows); call once,
  // from the live call's done.
  void Live(const InferResult& result, const TokenRows* tokens = nullptr);
  // Submits the copy to the shadow version: `call` as decoded (the shadow version's own prompt is applied), the
  // live call's deadline. Call once, after the live call was submitted. A version on HF tokenizers gets its texts
  // as ids from Python: the copy is handed over as a ShadowTokenize (events.h) on the version's event queue.
  void Submit(const DecodedCall& call, std::optional<Clock::time_point> deadline);
  // A ShadowTokenize's ids, from Python: one row a text (`seconds`: where each pair's second text begins, or
  // empty; `tokens`: a token classifier's spans). False when the copy was submitted or failed already.
  bool SubmitIds(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds, TokenRows tokens);
  // A ShadowTokenize Python could not tokenize (kInternal) or had no room for (kResourceExhausted: dropped): the
  // copy ends with `code` and `message`. False when it was submitted or failed already.
  bool Fail(Code code, std::string message);

  struct Lease;  // the shadow version's lease and route (shadow_copy.cc)
  ShadowCopy(std::unique_ptr<Lease> lease, ShadowEvent event, const VersionOutput* stable);

 private:
  void Arrived(std::unique_lock<std::mutex>& lock);  // one side's answer is in: the second pushes the event
  InferDone CandidateDone();                         // the shadow version's answer, into the event
  bool Handing();                                    // marks the copy submitted; false when it was already

  std::unique_ptr<Lease> lease_;
  const VersionOutput* stable_;  // what the live version answers (the lease's table keeps it)
  TokenRows tokens_;             // a token classifier's copy: its own token rows, filled by SubmitShadow
  std::mutex mutex_;  // guards event_ and arrived_
  ShadowEvent event_;
  int arrived_ = 0;
  bool handed_ = false;  // submitted to the batcher, or failed
  std::optional<Clock::time_point> deadline_;  // the live call's, for a copy tokenized by Python
};

}  // namespace ortserve
