"""Named pause points so crash tests can SIGKILL a writer at an exact step, deterministically.

Set ORTSERVE_TEST_PAUSE_AT=<name> (or <name>:<seconds>, default 30): the process prints
`paused at <name>` to stderr and sleeps there, the first time it passes that point only.
Unset (always, outside tests) it costs one dict lookup.
"""

from __future__ import annotations

import os
import sys
import time

PAUSE_ENV = "ORTSERVE_TEST_PAUSE_AT"
_passed: set[str] = set()


def pause_point(name: str) -> None:
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    target, _, seconds = spec.partition(":")
    if target != name or name in _passed:
        return
    _passed.add(name)
    print(f"paused at {name}", file=sys.stderr, flush=True)
    time.sleep(float(seconds or 30))
