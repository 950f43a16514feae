"""A model bundle as files: its manifest (manifest.py), the full check publish runs (validate.py), its reference
answers (references.py) and the CPU facts a version is judged by (cpu.py). Read by the server and the registry,
written by the preparation (ortserve/prepare); it imports nothing else of ortserve."""
