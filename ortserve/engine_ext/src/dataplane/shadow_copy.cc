#include "shadow_copy.h"

#include <utility>
#include <vector>

namespace ortserve {

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
  if (version == route.versions.end() || !version->second || !version->second->batcher().tokenizes()) return nullptr;
  const VersionOutput& served = route.OutputOf(route.shadow);
  if (served.per_token || CheckOutputs(call, served, model)) return nullptr;
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
  return std::make_shared<ShadowCopy>(std::move(lease), std::move(event));
}

ShadowCopy::ShadowCopy(std::unique_ptr<Lease> lease, ShadowEvent event)
    : lease_(std::move(lease)), event_(std::move(event)) {}

ShadowCopy::~ShadowCopy() {
  if (lease_->held) lease_->version->Release();
}

void ShadowCopy::Live(const InferResult& result) {
  std::unique_lock<std::mutex> lock(mutex_);
  event_.stable_status = CodeName(result.code);
  if (result.code == Code::kOk) {
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
  std::shared_ptr<ShadowCopy> self = shared_from_this();
  lease_->version->batcher().SubmitShadow(texts, call.pairs, deadline, [self](InferResult&& result) {
    self->lease_->version->Release();
    std::unique_lock<std::mutex> lock(self->mutex_);
    self->lease_->held = false;
    self->event_.candidate_status = CodeName(result.code);
    self->event_.candidate_error = std::move(result.message);
    if (result.code == Code::kOk) {
      self->event_.candidate_values = std::move(result.logits);
      self->event_.candidate_columns = result.columns;
      self->event_.candidate_engine_s = result.engine_s;
      self->event_.candidate_queue_s = result.queue_s;
    }
    self->Arrived(lock);
  });
}

void ShadowCopy::Arrived(std::unique_lock<std::mutex>& lock) {
  if (++arrived_ < 2) return;
  ShadowEvent event = std::move(event_);
  std::shared_ptr<EventSink> events = lease_->version->batcher().events();
  lock.unlock();
  if (events) events->Push(std::move(event));
}

}  // namespace ortserve
