// Where the next run goes: which session (wide or narrow) and which lane. Pure functions over a plain copy of the
// batcher's load, taken under its mutex; tested with plain values (tests/dataplane/test_batch_policy.py).
//
// A call that finds the engine idle and nothing queued runs alone on the wide (multi-threaded) session, which sets
// unloaded latency; anything that had to queue runs on the narrow (one-thread) one, up to engine_concurrency runs
// side by side. Under load that keeps every core on its own batch: runs of a multi-threaded session wait at every
// operator for whichever of their threads was preempted, and leave the other core idle.
//
// Queue-behind: once the pending texts fill the sort window, one more batch may be queued behind each running lane
// batch, so that the batch chosen now is the one chosen when that lane frees (never beside a lone run, which is on
// no lane).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace ortserve {

enum class Session { kWide, kNarrow };

// The fixed part, from the version's settings and its sessions.
struct LaneConfig {
  int engine_concurrency = 2;
  int lanes = 0;                // lanes this version uses (the first engine_concurrency); 0: wide threads only
  bool has_narrow = false;      // a narrow session exists and runs go side by side
  size_t queue_behind_at = 0;   // pending texts that fill the sort window (sort_window, else max_batch_size)
};

// The moving part: this version's runs as they stand.
struct EngineLoad {
  int in_flight = 0;          // runs handed to a lane or wide thread, not finished
  bool wide_running = false;  // one of them is on the wide session, which holds every intra-op thread
  int on_lanes = 0;           // how many of them are lane batches (the rest are lone runs on wide threads)
  size_t pending = 0;         // texts queued, not in a batch
};

// The session of the next run, or nullopt while the engine has no room for it. `queued`: the run is a batch from
// the queue (false: a lone call that found nothing queued).
std::optional<Session> NextRun(const EngineLoad& load, bool queued, const LaneConfig& config);

// The lane for the next batch: the one with the fewest of this version's batches, ties to the one with the fewest
// batches of every version, then the lowest index. `version_batches` and `all_batches` per lane, same length >= 1.
int PickLane(const std::vector<int>& version_batches, const std::vector<int>& all_batches);

}  // namespace ortserve
