"""The project's benchmark (scripts/dev bench serve): KServe V2 load, the engine-alone limit, reports.

Modules: corpus (deterministic texts), v2client (generic V2 gRPC and REST requests), server_cpu (where the server's
CPU went), prom (server /metrics deltas), engine_limit (tokenize + Engine.run alone), report (table, JSON, plot), plan
(what a sweep runs), compare (two servers or transports side by side), cli (the command). The load generator
(closed/open loop) and the server launcher are the tools' (ortserve_devtools.loadgen, .server_process), shared with
the tests, the soak and the GPU check.
"""
