"""The project's benchmark (scripts/bench): a KServe V2 load generator, the engine-alone limit, reports.

Modules: corpus (deterministic texts), v2client (generic V2 gRPC requests), loadgen (closed/open
loop), server_cpu (where the server's CPU went), prom (server /metrics deltas), engine_limit (tokenize +
Engine.run alone), report (table, JSON, plot), plan (what a sweep runs), cli (the command).
"""
