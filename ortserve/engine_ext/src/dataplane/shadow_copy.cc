#include "shadow_copy.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ortserve {
namespace {

// A token classifier's entities, text by text (simple aggregation: the judge's rule, bundle/agreement.py).
std::vector<ShadowEntity> EntitiesOf(const InferResult& result, const TokenRows& tokens,
                                     const std::vector<std::string>& labels) {
  std::vector<ShadowEntity> out;
  const auto columns = static_cast<size_t>(std::max(result.columns, 0));
  for (size_t r = 0; r < static_cast<size_t>(result.rows) && r < tokens.spans.size(); ++r) {
    if (tokens.spans[r].size() * labels.size() > columns) continue;  // never read past a row
    for (Entity& e : AggregateEntities(result.logits.data() + r * columns, tokens.spans[r], labels,
                                       Aggregation::kSimple)) {
      out.push_back(ShadowEntity{static_cast<int>(r), e.start, e.end, std::move(e.label)});
    }
  }
  return out;
}

}  // namespace

struct ShadowCopy::Lease {
  std::shared_ptr<ServedVersion> version;
  std::shared_ptr<const RouteTable> table;  // keeps `served` alive
  const VersionOutput* served = nullptr;
  bool held = true;  // released once answered (or never submitted)
};

std::shared_ptr<ShadowCopy> ShadowCopy::Of(const RoutedCall& routed, const std::string& model,
                                           const DecodedCall& call, std::string_view request_id) {
  if (routed.bucket < 0 || !routed.table) return nullptr;  // pinned calls are not copied
  const auto found = routed.table->models.find(model);
  if (found == routed.table->models.end()) return nullptr;
  const ModelRoute& route = found->second;
  if (route.shadow.empty() || route.shadow == routed.version_name || routed.bucket >= route.shadow_buckets) {
    return nullptr;
  }
  const auto version = route.versions.find(route.shadow);
  if (version == route.versions.end() || !version->second) return nullptr;
  const VersionOutput& served = route.OutputOf(route.shadow);
  // A token classifier's copy is judged on entities: the live version must answer them too, with labels.
  if (served.per_token != routed.served->per_token || (served.per_token && served.labels.empty())) return nullptr;
  if (served.sparse != routed.served->sparse) return nullptr;  // a dense copy of a sparse call, or back: no judge
  if (CheckOutputs(call, served, model)) return nullptr;
  if (!version->second->Acquire()) return nullptr;
  auto lease = std::make_unique<Lease>();
  lease->version = version->second;
  lease->table = routed.table;
  lease->served = &served;
  ShadowEvent event;
  event.request_id = request_id;
  event.model = model;
  event.stable = routed.version_name;
  event.candidate = route.shadow;
  if (route.shadow_texts) event.texts.assign(call.texts.begin(), call.texts.end());
  event.per_token = served.per_token;
  return std::make_shared<ShadowCopy>(std::move(lease), std::move(event), routed.served);
}

ShadowCopy::ShadowCopy(std::unique_ptr<Lease> lease, ShadowEvent event, const VersionOutput* stable)
    : lease_(std::move(lease)), stable_(stable), event_(std::move(event)) {}

ShadowCopy::~ShadowCopy() {
  if (lease_->held) lease_->version->Release();
}

void ShadowCopy::Live(const InferResult& result, const TokenRows* tokens) {
  std::unique_lock<std::mutex> lock(mutex_);
  event_.stable_status = CodeName(result.code);
  if (result.code == Code::kOk && event_.per_token) {
    if (tokens != nullptr) event_.stable_entities = EntitiesOf(result, *tokens, stable_->labels);
    event_.rows = result.rows;
    event_.stable_engine_s = result.engine_s;
  } else if (result.code == Code::kOk) {
    event_.stable_values = result.logits;
    event_.rows = result.rows;
    event_.stable_columns = result.columns;
    event_.stable_engine_s = result.engine_s;
  }
  Arrived(lock);
}

void ShadowCopy::Submit(const DecodedCall& call, std::optional<Clock::time_point> deadline) {
  // The texts the shadow version reads: after its own prompt, if the call names one.
  const std::vector<std::string> prompted = PromptedTexts(call, *lease_->served);
  std::vector<std::string_view> texts = call.texts;
  if (!prompted.empty()) texts.assign(prompted.begin(), prompted.end());
  Batcher& batcher = lease_->version->batcher();
  if (!batcher.tokenizes()) {
    std::shared_ptr<EventSink> events = batcher.events();
    if (!events) return;  // nobody to tokenize it: dropped, the lease given back
    {
      std::lock_guard<std::mutex> lock(mutex_);
      deadline_ = deadline;
    }
    ShadowTokenize handoff{shared_from_this(), event_.model, event_.candidate,
                           std::vector<std::string>(texts.begin(), texts.end()),
                           std::vector<std::string>(call.pairs.begin(), call.pairs.end())};
    events->Push(std::move(handoff));
    return;
  }
  if (!Handing()) return;
  TokenRows* tokens = event_.per_token ? &tokens_ : nullptr;  // filled before the copy is queued
  batcher.SubmitShadow(texts, call.pairs, deadline, tokens, CandidateDone());
}

bool ShadowCopy::SubmitIds(std::vector<std::vector<int64_t>> ids, std::vector<int> seconds, TokenRows tokens) {
  std::optional<Clock::time_point> deadline;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed_) return false;
    handed_ = true;
    tokens_ = std::move(tokens);
    deadline = deadline_;
  }
  lease_->version->batcher().SubmitShadowIds(std::move(ids), std::move(seconds), deadline, CandidateDone());
  return true;
}

bool ShadowCopy::Fail(Code code, std::string message) {
  if (!Handing()) return false;
  InferResult failed;
  failed.code = code;
  failed.message = std::move(message);
  CandidateDone()(std::move(failed));
  return true;
}

bool ShadowCopy::Handing() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handed_) return false;
  handed_ = true;
  return true;
}

InferDone ShadowCopy::CandidateDone() {
  return [self = shared_from_this()](InferResult&& result) {
    self->lease_->version->Release();
    std::unique_lock<std::mutex> lock(self->mutex_);
    self->lease_->held = false;
    self->event_.candidate_status = CodeName(result.code);
    self->event_.candidate_error = std::move(result.message);
    if (result.code == Code::kOk && self->event_.per_token) {
      self->event_.candidate_entities = EntitiesOf(result, self->tokens_, self->lease_->served->labels);
      self->event_.candidate_engine_s = result.engine_s;
      self->event_.candidate_queue_s = result.queue_s;
    } else if (result.code == Code::kOk) {
      self->event_.candidate_values = std::move(result.logits);
      self->event_.candidate_columns = result.columns;
      self->event_.candidate_engine_s = result.engine_s;
      self->event_.candidate_queue_s = result.queue_s;
    }
    self->Arrived(lock);
  };
}

void ShadowCopy::Arrived(std::unique_lock<std::mutex>& lock) {
  if (++arrived_ < 2) return;
  ShadowEvent event = std::move(event_);
  std::shared_ptr<EventSink> events = lease_->version->batcher().events();
  lock.unlock();
  if (events) events->Push(std::move(event));
}

}  // namespace ortserve
