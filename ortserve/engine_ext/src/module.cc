// The module root of ortserve.engine_ext._engine: one Bind call per concept of each room (engine/, then
// dataplane/, which uses the engine and never the reverse), and what the build decided (HAS_FRONTEND).
#include <nanobind/nanobind.h>

#include "dataplane_bindings.h"
#include "engine_bindings.h"
#include "frontend_config.h"

NB_MODULE(_engine, m) {
  m.doc() = "ONNX Runtime engine (C++). Import ortserve.engine_ext, not this module.";
  BindEngine(m);  // first: the exception classes every later binding's errors map to
  BindWordPiece(m);

  BindPolicy(m);
  BindAdmission(m);
  BindLaneChoice(m);
  BindEvents(m);
  BindLanes(m);
  BindBatcherSettings(m);
  BindEngineRun(m);
  BindCompletions(m);
  BindServedVersion(m);
  BindRoute(m);
  BindClassification(m);
  BindEntities(m);
  BindWire(m);
  BindCallPath(m);
#ifdef ORTSERVE_WITH_FRONTEND
  BindFrontend(m);
  m.attr("HAS_FRONTEND") = true;
#else
  m.attr("HAS_FRONTEND") = false;
#endif
  m.attr("FRONTEND_MISSING") = ORTSERVE_FRONTEND_MISSING;  // "" when built
}
