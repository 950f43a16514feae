// The data plane's one clock: deadlines, queue times and run times are steady-clock readings, compared in seconds.
#pragma once

#include <chrono>

namespace ortserve {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }
inline double NowS() { return Seconds(Clock::now()); }

}  // namespace ortserve
