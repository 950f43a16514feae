// Events: what the native data path reports to Python (one record per request, one per engine run), through
// a bounded queue that a Python thread drains into the same structlog lines and Prometheus metrics the Python
// path writes. Producers never block: a full queue drops the record and counts it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

namespace ortserve {

// One answered ModelInfer (the fields of handlers.py's "request" log line).
struct RequestEvent {
  std::string request_id;
  std::string model;
  std::string version;   // "" when none was chosen
  std::string route;     // "pin" or "bucket N"
  int texts = 0;
  int batch_size = 0;
  double queue_s = 0, tokenize_s = 0, engine_s = 0, total_s = 0;
  std::string status;    // gRPC status code name: "OK", "RESOURCE_EXHAUSTED", ...
  std::string error;     // the message sent to the caller, "" on OK
  double ended_unix = 0;  // wall clock (seconds since the epoch) when the reply went out: the log line's time
  // The caller's trace context (infer_wire.h ParseTraceContext): "" / -1 when it sent none.
  std::string trace_id, parent_span_id, tracestate;
  int sampled = -1;
};

// One engine run.
struct BatchEvent {
  std::string model;
  std::string version;
  int texts = 0;
  int padded_tokens = 0;
  int real_tokens = 0;
  double engine_s = 0;
  std::string lane;  // "wide" | "narrow"
};

// A token classifier's entity in a shadow copy's comparison: its text (row), its span of characters and its label.
struct ShadowEntity {
  int row = 0;
  int64_t start = 0, end = 0;
  std::string label;
};

// One shadow copy (shadow_copy.h): the live answer and the shadow version's to the same texts, for Python's judge
// (bundle/agreement.py) and the shadow metrics. Values are rows x columns, row-major; empty unless that side was OK.
// A token classifier's copy carries each side's entities (simple aggregation) instead of its values.
struct ShadowEvent {
  std::string request_id;
  std::string model;
  std::string stable;     // the version that answered the caller
  std::string candidate;  // the shadow version
  std::string stable_status, candidate_status;  // gRPC status code names
  std::string candidate_error;                  // its message, "" on OK
  int rows = 0, stable_columns = 0, candidate_columns = 0;
  std::vector<float> stable_values, candidate_values;
  bool per_token = false;  // both sides are token classifiers: compare their entities
  std::vector<ShadowEntity> stable_entities, candidate_entities;
  double stable_engine_s = 0, candidate_engine_s = 0, candidate_queue_s = 0;
  std::vector<std::string> texts;  // the call's texts, when the route keeps them (ModelRoute::shadow_texts)
};

class ShadowCopy;

// A shadow copy whose version reads ids from HF tokenizers (no C++ tokenizer): a request, not a record. Python
// tokenizes `texts` (and `pairs`) with that version's tokenizer, off the live path, and submits the ids to the copy
// (ShadowCopy::SubmitIds) or fails it (ShadowCopy::Fail); dropped unread, the copy gives its lease back.
struct ShadowTokenize {
  std::shared_ptr<ShadowCopy> copy;
  std::string model, candidate;
  std::vector<std::string> texts, pairs;  // what the shadow version reads (after its prompt); pairs: empty or one a text
};

using Event = std::variant<RequestEvent, BatchEvent, ShadowEvent, ShadowTokenize>;

class EventSink {
 public:
  explicit EventSink(size_t capacity = 65536);
  // Never blocks; drops (and counts) when full. Any thread.
  void Push(Event event);
  // Up to `max` events; waits up to `timeout_s` for the first one. Returns empty on timeout or after Close().
  std::vector<Event> Drain(size_t max, double timeout_s);
  // Wakes Drain() for good; later pushes are dropped.
  void Close();
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Records accepted so far: a consumer that counts what it handled knows when it has caught up.
  uint64_t pushed() const { return pushed_.load(std::memory_order_acquire); }
  bool closed() const;

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> queue_;
  bool closed_ = false;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> pushed_{0};
};

}  // namespace ortserve
