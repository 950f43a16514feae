// Where the next run goes (see lane_choice.h).
#include "lane_choice.h"

namespace ortserve {

std::optional<Session> NextRun(const EngineLoad& load, bool queued, const LaneConfig& config) {
  if (load.wide_running) return std::nullopt;
  const int concurrency = config.engine_concurrency;
  if (load.in_flight >= concurrency) {
    const bool behind = queued && config.lanes > 0 && load.in_flight < 2 * concurrency &&
                        load.on_lanes == load.in_flight && load.pending >= config.queue_behind_at;
    if (!behind) return std::nullopt;
  }
  if (!config.has_narrow) return Session::kWide;
  return load.in_flight != 0 || queued ? Session::kNarrow : Session::kWide;
}

int PickLane(const std::vector<int>& version_batches, const std::vector<int>& all_batches) {
  int best = 0;
  for (size_t lane = 1; lane < version_batches.size(); ++lane) {
    const auto b = static_cast<size_t>(best);
    if (version_batches[lane] < version_batches[b] ||
        (version_batches[lane] == version_batches[b] && all_batches[lane] < all_batches[b])) {
      best = static_cast<int>(lane);
    }
  }
  return best;
}

}  // namespace ortserve
