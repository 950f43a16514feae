"""scripts/replicas: how fast several replicas on one registry converge after a route change.

Modules: convergence (the registry, the replica processes, one measured change after another), cli (the command,
its report). The processes are soak_lib's (RegistryServer, ServerLog, AdminClient); the stand-in is
ortserve_devtools.consul_standin.StandinProcess.
"""
