// Python bindings of the lane choice's pure functions (lane_choice.h), for their tests: the batcher calls them in
// C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "dataplane_bindings.h"
#include "lane_choice.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace ortserve;

void BindLaneChoice(nb::module_& m) {
  m.def(
      "next_run",
      [](int in_flight, bool wide_running, int on_lanes, size_t pending, bool queued, int engine_concurrency,
         int lanes, bool has_narrow, size_t queue_behind_at) -> std::optional<std::string> {
        const std::optional<Session> session =
            NextRun(EngineLoad{in_flight, wide_running, on_lanes, pending}, queued,
                    LaneConfig{engine_concurrency, lanes, has_narrow, queue_behind_at});
        if (!session) return std::nullopt;
        return *session == Session::kWide ? "wide" : "narrow";
      },
      nb::kw_only(), "in_flight"_a, "wide_running"_a, "on_lanes"_a, "pending"_a, "queued"_a, "engine_concurrency"_a,
      "lanes"_a, "has_narrow"_a, "queue_behind_at"_a,
      "The session of the next run (\"wide\" or \"narrow\"), or None while the engine has no room for it: a queued "
      "batch (queued=True) or a lone call, over a plain snapshot of the version's runs.");
  m.def(
      "pick_lane",
      [](const std::vector<int>& version_batches, const std::vector<int>& all_batches) {
        if (version_batches.empty() || version_batches.size() != all_batches.size()) {
          throw nb::value_error("version_batches and all_batches need one entry per lane, at least one lane");
        }
        return PickLane(version_batches, all_batches);
      },
      "version_batches"_a, "all_batches"_a,
      "The lane for the next batch: fewest of this version's batches, then fewest of every version's, then the "
      "lowest index.");
}
