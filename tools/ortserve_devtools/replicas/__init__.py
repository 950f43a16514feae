"""scripts/dev replicas: how fast several replicas on one registry converge after a route change.

Modules: convergence (the registry, the replica processes, one measured change after another), cli (the command,
its report). The servers are started by the tools' launcher (ortserve_devtools.server_process, through
soak.processes.start_registry_server) and followed by its ServerLog; soak's AdminClient asks them; the
stand-in is ortserve_devtools.consul_standin.StandinProcess.
"""
