"""scripts/dev image: build deploy/Dockerfile offline with podman and run the image as the Kubernetes manifests do.

Modules: podman (the one podman command line and the host tools it needs), bases (Debian bases made by mmdebstrap),
build_inputs (the wheelhouse and ORT headers the offline build reads), build (the build and its size report),
pod_contract (what deploy/k8s says a container gets, checked against the image), container (the podman run line for
a contract), smoke_calls (the gRPC, Prometheus and shutdown checks), smoke (the smoke, step by step), cli.
"""
