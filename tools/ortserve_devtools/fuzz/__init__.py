"""Fuzzing ortserve over real gRPC: hypothesis strategies for hostile ModelInfer calls and the checks every answer
must pass. Shared by the bounded run in the suite (tests/fuzz/test_grpc_fuzz.py) and the long run (scripts/dev fuzz).

requests.py builds the inputs (structured ModelInferRequests and mutated serialised bodies), harness.py sends them
to a server and checks what comes back, cli.py is scripts/dev fuzz.
"""
