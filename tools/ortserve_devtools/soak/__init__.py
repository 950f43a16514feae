"""The soak (scripts/dev soak): steady load at a fraction of saturation while the registry, the Consul stand-in and the
artifact cache are disturbed on a schedule; reports failed calls, server RSS / open fds over time, P99 per minute.

Modules: schedule (the timed events, pure), client (a load process: the tools' loadgen with a per-call record),
processes (Consul stand-in, registry-backed server, registry CLI, client processes), drill (the cache corruption),
analysis (per-minute buckets and the holds, pure), report (table, JSON, plot), cli (the command).
"""
