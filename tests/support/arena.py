"""The process-wide capped CPU arena's size, shared by every test that asks for one.

ONNX Runtime keeps one such arena per process, capped at the first size any session asked for; a test that asked
for another size would fail (or pass) depending on which test ran first, so every test imports this one.
"""

from __future__ import annotations

# The tiny BERT of hidden 64 runs a 2 x 16 batch in it but not a 64 x 256 one (tests/engine/test_engine_memory.py).
CPU_ARENA_LIMIT_MB = 8
