// What the data plane's binding files share: the C++ objects Python holds (each through a shared_ptr the batchers
// and route tables share, so that no C++ thread ever drops a Python reference) and the conversions more than one
// binding needs. Every function here runs with the GIL held.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "batch_policy.h"
#include "call.h"
#include "completions.h"
#include "engine_run.h"
#include "events.h"
#include "lanes.h"
#include "route.h"
#include "served_version.h"

namespace ortserve {

struct PyEventSink {  // Python's EventSink
  std::shared_ptr<EventSink> sink;
};

struct PyLanes {  // Python's Lanes
  std::shared_ptr<Lanes> lanes;
};

// Python's TextModel: the engines and tokenizer a version's batches run on, borrowed from their Python
// objects (nb::keep_alive).
struct PyTextModel {
  TextModel model;
};

// Python's ServedVersion.
struct PyServedVersion {
  std::shared_ptr<ServedVersion> version;
  // The text model is borrowed from a Python object (kept alive by nb::keep_alive, released after this
  // destructor): close first, so that no run or tokenize can outlive it. Close never needs the GIL.
  ~PyServedVersion() {
    if (version) version->batcher().Close();
  }
};

struct PyCompletions {  // Python's Completions
  std::shared_ptr<Completions> completions;
};

struct PyRoutes {  // Python's Routes: the route table both front ends read (the data plane owns it)
  std::shared_ptr<RouteHolder> holder = std::make_shared<RouteHolder>();
};

// A deadline `timeout_s` from now on the batcher's clock; nullopt: none.
std::optional<Clock::time_point> DeadlineIn(std::optional<double> timeout_s);

// The version a Python ServedVersion object holds (shared: the route table keeps copies). Throws
// nanobind::cast_error when `object` is not a ServedVersion.
std::shared_ptr<ServedVersion> ServedVersionPtr(nanobind::handle object);

// The sink a Python EventSink object holds (the front end pushes its request records there). Throws
// nanobind::cast_error when `object` is not an EventSink.
std::shared_ptr<EventSink> EventSinkPtr(nanobind::handle object);

// (code name, message, output float32 [rows, columns] or None, timings): a call's answer as Python reads it.
nanobind::tuple ResultTuple(InferResult& result);
// {tokenize_s, queue_s, engine_s, batch_size, retry_after_s, tokens} of a call's answer.
nanobind::dict Timings(const InferResult& result);

BatchPolicy MakePolicy(int max_batch_size, double max_queue_delay_s, double max_padding_ratio,
                       int batch_overhead_tokens, int max_batch_tokens, int sort_window);

// One int64 array per row (any stride) as token-id rows.
std::vector<std::vector<int64_t>> IdRows(nanobind::handle rows);

}  // namespace ortserve
