"""The tools' one launcher: `scripts/dev GROUP [COMMAND] ARGS` (also `python -m ortserve_devtools ...`).

    scripts/dev bench serve --sweep          # the benchmark (docs/benchmarks.md names every bench command)
    scripts/dev soak --minutes 30
    scripts/dev fuzz --minutes 10
    scripts/dev replicas
    scripts/dev image build|smoke
    scripts/dev gpu check|stage|unpack
    scripts/dev --help                       # every command, one line each

Standard library only, and so is choosing the interpreter: a command that needs the project's dependencies (its
`needs` modules) and is started by a Python without them runs again under the checkout's .venv python, as the
scripts did one by one before. Such a command measures the checkout's in-place engine build (scripts/build_inplace)
when there is one, else the installed ortserve, else the source tree; a server it starts as `python -m ...` imports
the same (PYTHONSAFEPATH: never the working directory first). The GPU stage and unpack need nothing but Python 3.11.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ortserve_devtools.checkout import ROOT, SCRIPTS, VENV_PYTHON

PROJECT = ("grpc",)  # the project's venv (grpcio is in every extra)


@dataclass(frozen=True)
class Tool:
    """One command: the module whose main(argv) runs it (or a script of scripts/ run as it is), and what it needs."""

    summary: str
    module: str = ""
    script: str = ""
    needs: tuple[str, ...] = PROJECT


_B = "ortserve_devtools.bench."
TOOLS: dict[str, dict[str, Tool]] = {
    "bench": {
        "serve": Tool("KServe V2 load against a served model vs the engine-alone limit", _B + "serve"),
        "ab": Tool("two checkouts' bench serve, alternately, per cell and round", _B + "ab", needs=()),
        "engines": Tool("CPU inference engines (ORT, OpenVINO, PyTorch) on MiniLM and BERT-base", _B + "engines",
                        needs=("openvino",)),
        "infinity": Tool("ortserve beside Infinity on the same MiniLM and corpus", _B + "infinity"),
        "mixed": Tool("bulk jobs and interactive calls on one server; the request log's cost", _B + "mixed"),
        "precisions": Tool("one model served at fp32, bf16 and int8 in the same minutes", _B + "precisions"),
        "rerank": Tool("reranking served against the engine alone", _B + "rerank"),
        "shadow": Tool("what a shadow copy costs the stable version at saturation", _B + "shadow"),
        "swap": Tool("hot reload: a registry change to traffic, P99 during swaps", _B + "swap"),
        "tokens": Tool("what entities cost a token classifier against its engine time", _B + "tokens"),
        "decoder": Tool("a 0.6B decoder embedder served at FP32 and bf16 beside PyTorch", _B + "decoder",
                        needs=("torch", "transformers")),
        "refusal-cost": Tool("CPU per RESOURCE_EXHAUSTED answer on one front end", _B + "refusal_cost"),
        "spike-memory": Tool("memory after a spike and the cost of a maximal legal call", _B + "spike_memory"),
    },
    "soak": {"": Tool("steady load while the registry, stand-in and cache are disturbed",
                      "ortserve_devtools.soak.cli")},
    "fuzz": {"": Tool("hostile calls over gRPC and HTTP against both front ends", "ortserve_devtools.fuzz.cli",
                      needs=("grpc", "hypothesis"))},
    "replicas": {"": Tool("replicas on one registry: a route change to the last swap",
                          "ortserve_devtools.replicas.cli")},
    "image": {"": Tool("the container image built offline (build) and run as deploy/k8s runs it (smoke)",
                       "ortserve_devtools.image.cli")},
    "gpu": {
        "check": Tool("on the GPU host: unpack the stage, build the engine, measure", script="gpu_check", needs=()),
        "stage": Tool("with network: stage what a bare CUDA host lacks", "ortserve_devtools.gpu.stage", needs=()),
        "unpack": Tool("on the GPU host: reassemble a stage, print its shell exports", "ortserve_devtools.gpu.unpack",
                       needs=()),
    },
}


def usage() -> str:
    lines = ["usage: scripts/dev GROUP [COMMAND] [ARGS...]  (COMMAND --help for its options)", ""]
    for group, commands in TOOLS.items():
        for name, tool in commands.items():
            lines.append(f"  {f'{group} {name}'.strip():<22} {tool.summary}")
    return "\n".join(lines)


class UsageError(Exception):
    """A command line that names no command: the message says which were meant."""


def resolve(argv: Sequence[str]) -> tuple[str, Tool, list[str]]:
    """(the command's name, its tool, its own arguments); UsageError when argv names no command."""
    if not argv:
        raise UsageError("scripts/dev: name a command")
    group, *rest = argv
    commands = TOOLS.get(group)
    if commands is None:
        raise UsageError(f"scripts/dev: no command {group!r}")
    if "" in commands:
        return group, commands[""], list(rest)
    if not rest or rest[0] not in commands:
        named = f" {rest[0]!r}" if rest else ""
        raise UsageError(f"scripts/dev {group}: name one of {', '.join(commands)}; got{named or ' none'}")
    return f"{group} {rest[0]}", commands[rest[0]], rest[1:]


def missing(modules: Sequence[str]) -> str | None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            return name
    return None


def use_checkout_ortserve() -> None:
    """The checkout's in-place engine build if it has one (what is being worked on: measure it, not the copy `pip
    install` put in the venv, which would silently miss every edit since), else the installed ortserve, else the
    source tree (a checkout that is not installed)."""
    if list((ROOT / "ortserve" / "engine_ext").glob("_engine*.so")):
        sys.path.insert(1, str(ROOT))
        return
    try:
        import ortserve  # noqa: F401  (installed package, if any)
    except ModuleNotFoundError:
        sys.path.insert(1, str(ROOT))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(usage())
        return 0
    try:
        name, tool, args = resolve(argv)
    except UsageError as e:
        print(f"{usage()}\n\n{e}", file=sys.stderr)
        return 2
    if tool.script:
        return subprocess.call([str(SCRIPTS / tool.script), *args])
    lacking = missing(tool.needs)
    if lacking:
        # Started by a Python without the project's dependencies: run again under the repository's venv.
        if VENV_PYTHON.is_file() and os.path.realpath(sys.prefix) != os.path.realpath(VENV_PYTHON.parent.parent):
            os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(SCRIPTS / "dev"), *argv])
        raise SystemExit(f"scripts/dev {name}: needs {lacking} and the ortserve dependencies; run scripts/bootstrap "
                         "dev or use the venv's python")
    if tool.needs:
        use_checkout_ortserve()
        os.environ.setdefault("PYTHONSAFEPATH", "1")
    sys.argv = [f"scripts/dev {name}", *args]
    result = importlib.import_module(tool.module).main(args)
    return int(result or 0)
