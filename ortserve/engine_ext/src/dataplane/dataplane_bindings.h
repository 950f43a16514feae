// The data plane's Python surface, one Bind function per concept; the module root (src/module.cc) calls them.
#pragma once

#include <nanobind/nanobind.h>

void BindPolicy(nanobind::module_& m);          // policy_bindings.cc: ChooseBatch, SplitRows, BucketShape, Throughput
void BindAdmission(nanobind::module_& m);       // admission_bindings.cc: Admission, CallTokens
void BindLaneChoice(nanobind::module_& m);      // lane_choice_bindings.cc: NextRun, PickLane
void BindEvents(nanobind::module_& m);          // event_bindings.cc: RequestEvent, BatchEvent, EventSink
void BindLanes(nanobind::module_& m);           // lanes_bindings.cc: Lanes
void BindBatcherSettings(nanobind::module_& m); // batcher_bindings.cc: BatcherSettings, batcher_defaults
void BindEngineRun(nanobind::module_& m);       // engine_run_bindings.cc: TextModel
void BindCompletions(nanobind::module_& m);     // completions_bindings.cc: Completions
void BindServedVersion(nanobind::module_& m);   // served_version_bindings.cc: ServedVersion, Ticket, SubmittedCall
void BindRoute(nanobind::module_& m);           // route_bindings.cc
void BindClassification(nanobind::module_& m);  // classification_bindings.cc
void BindEntities(nanobind::module_& m);        // entities_bindings.cc: token classification's entities
void BindWire(nanobind::module_& m);            // wire_bindings.cc
void BindCallPath(nanobind::module_& m);        // call_path_bindings.cc: Routes, StartedCall, start_call
#ifdef ORTSERVE_WITH_FRONTEND
void BindFrontend(nanobind::module_& m);        // frontend_bindings.cc
#endif
