"""The `registry` command: publish bundles, import checkpoints and steer traffic. A thin shell over `publishing`,
`optimize` and `importer`.

Exit codes: 0 ok, 1 refused (a gate, the registry; the reason on stderr), 2 usage or bad input (a checkpoint
`import` cannot take), 3 registry unreachable. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ortserve.bundle.manifest import MAX_SEQ_LEN, MIN_SEQ_LEN, OPTIMIZATION_LEVELS, BundleError
from ortserve.prepare import importer
from ortserve.prepare.accuracy import BOUND_METHOD, GateSettings, decisive_needed
from ortserve.prepare.importer.checkpoint import read_checkpoint
from ortserve.prepare.model_writer import EXTERNAL_DATA_ABOVE
from ortserve.prepare.optimize import (
    FUSED_OPS,
    QUANTIZED_OPS,
    SPARSE_REFUSAL,
    TOKEN_CLASSIFIER_REFUSAL,
    GateRefused,
    OptimizeError,
    OptimizeResult,
    format_bytes,
    optimize_bundle,
)
from ortserve.registry import stepper
from ortserve.registry.address import (
    FileAddress,
    parse_registry_url,
    registry_url,
)
from ortserve.registry.artifacts import ARTIFACTS_ENV, ArtifactError, ArtifactStore
from ortserve.registry.catalog import ModelState, list_models, read_model_state
from ortserve.registry.publishing import Refused, publish, retire, rollback, route
from ortserve.registry.records import RecordError, Routing, VersionRecord, check_name, format_weights
from ortserve.registry.rollout import (
    Checks,
    Decision,
    Figures,
    Hold,
    Plan,
    Rollout,
    describe,
    parse_duration,
    parse_steps,
    summed,
)
from ortserve.registry.store import Store, StoreRefused, StoreUnavailable

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
# The accuracy gate's flags (`optimize`, and `publish` with --optimize); see accuracy.GateSettings.
GATE_FLAGS = ("min_margin", "min_agreement", "max_accuracy_drop", "accept_accuracy_loss", "speed_rounds")
WAIT_POLL_S = 1.0


class UsageError(Exception):
    """Bad command line input; exit 2."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _store_flags(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--registry", metavar="URL", default=default,
                   help="file:///path, file://./path or consul://host:8500?prefix=ortserve/ "
                        "(default: $ORTSERVE_REGISTRY or file://./model-store)")
    p.add_argument("--artifacts", metavar="URL", default=default,
                   help="file:// root of the artifact store (default: $ORTSERVE_ARTIFACTS, or "
                        "<file store root>/artifacts; required for Consul)")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="registry", description="Publish model bundles and steer traffic between versions.")
    _store_flags(p, None)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # The store flags are taken after the command too (`registry publish --registry URL ...`): a command's, when
    # given, overrides the one before it; SUPPRESS keeps an absent one from erasing it.
    store = argparse.ArgumentParser(add_help=False)
    _store_flags(store, argparse.SUPPRESS)

    def command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[store], **kw)

    s = command("publish", help="validate a bundle (or import a checkpoint), upload it, record the version")
    s.add_argument("--model", required=True)
    s.add_argument("--version", required=True)
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--bundle", metavar="DIR")
    source.add_argument("--from-hf", metavar="DIR",
                        help="import a Hugging Face checkpoint directory (see `import`) and publish that bundle")
    _import_flags(s)
    s.add_argument("--weight", type=_percent, metavar="W", help="also route W%% to this version (one atomic write)")
    s.add_argument("--optimize", choices=OPTIMIZATION_LEVELS, metavar="LEVEL",
                   help=f"publish the bundle optimised at LEVEL ({', '.join(OPTIMIZATION_LEVELS)}; see `optimize`), "
                        "if it passes the accuracy gate")
    _gate_flags(s)
    s.add_argument("--json", action="store_true", help="print only a JSON summary (with the gate's report)")

    s = command("optimize", help="write an optimised copy of a bundle (fuse: fused FP32, int8: INT8 for "
                                        "CPUs, fp16: fused FP16 for GPUs, bf16: the FP32 graph run in bf16 by "
                                        "OpenVINO on CPUs with AVX-512 BF16 or AMX), gated by an accuracy report; no "
                                        "registry needed")
    s.add_argument("--bundle", required=True, metavar="IN")
    s.add_argument("--out", required=True, metavar="DIR", help="a new or empty directory")
    s.add_argument("--optimize", required=True, choices=OPTIMIZATION_LEVELS, metavar="LEVEL",
                   help=f"one of {', '.join(OPTIMIZATION_LEVELS)}")
    _gate_flags(s)
    s.add_argument("--json", action="store_true", help="print only a JSON summary (with the gate's report)")

    s = command("import", help="write a bundle from a Hugging Face checkpoint directory (transformers or "
                                      "sentence-transformers), proven against PyTorch; no registry needed")
    s.add_argument("--from", required=True, metavar="DIR", dest="source",
                   help="the checkpoint directory: config.json, the weights, the tokenizer (or a sentence-transformers "
                        "directory)")
    s.add_argument("--out", required=True, metavar="BUNDLE", help="a new or empty directory")
    _import_flags(s)
    s.add_argument("--json", action="store_true", help="print only a JSON summary (with the parity report)")

    s = command("route", help="set traffic weights: registry route M v1=95 v2=5 [--shadow v3=10]")
    s.add_argument("model")
    s.add_argument("weights", nargs="+", metavar="VERSION=PERCENT")
    s.add_argument("--shadow", metavar="VERSION=PERCENT",
                   help="copy PERCENT%% of the calls (sticky by routing key) to VERSION, a version without weight; "
                        "its answers are compared with the live ones (`ortserve status`, ortserve_shadow_* metrics) "
                        "and never returned")

    s = command("rollout", help="take a version from shadow through canary steps to 100%% by itself, or back to "
                                "the stable version with the reason (docs/canary.md)")
    s.add_argument("model")
    s.add_argument("version", nargs="?", help="the candidate (not with --abort, --step)")
    s.add_argument("--from", dest="stable", metavar="VERSION",
                   help="the stable version (default: the one with 100%% of the traffic)")
    s.add_argument("--shadow", type=_duration, default=0.0, metavar="DURATION",
                   help="how long the candidate shadows the stable version first, its answers compared with the "
                        "live ones on the same calls (e.g. 10m; default 0: canary steps only)")
    s.add_argument("--shadow-percent", type=_percent, default=10, metavar="P",
                   help="the share of calls copied to the shadow (default 10)")
    s.add_argument("--min-agreement", type=_fraction, default=0.99, metavar="F",
                   help="least share of the judged answers on which the shadow agrees with the stable version "
                        "(default 0.99)")
    s.add_argument("--min-judged", type=int, default=100, metavar="N",
                   help="answers judged (over every replica) before agreement is judged (default 100)")
    s.add_argument("--steps", type=_steps, default=(5, 25, 50, 100), metavar="P,P,...",
                   help="the canary's weights, each held for --interval (default 5,25,50,100)")
    s.add_argument("--interval", type=_duration, default=120.0, metavar="DURATION", help="default 2m")
    s.add_argument("--max-error-rate", type=_fraction, default=0.001, metavar="F", help="default 0.001")
    s.add_argument("--max-p99-ratio", type=float, default=1.5, metavar="R",
                   help="the candidate's P99 latency over the stable one's, at most (default 1.5)")
    s.add_argument("--min-calls", type=int, default=100, metavar="N",
                   help="calls (over every replica) a stage needs before it advances (default 100)")
    action = s.add_mutually_exclusive_group()
    action.add_argument("--abort", action="store_true", help="stop the running rollout; traffic back to stable")
    action.add_argument("--step", action="store_true",
                        help="judge the running rollout once now (servers do this every few seconds)")
    s.add_argument("--wait", action="store_true",
                   help="step and follow the rollout until it ends; exit 0 promoted, 1 rolled back or aborted")

    s = command("rollback", help="restore the previous routing")
    s.add_argument("model")

    s = command("list", help="models, their versions and routing")
    s.add_argument("--json", action="store_true")

    s = command("show", help="one model's versions and routing")
    s.add_argument("model")
    s.add_argument("--json", action="store_true")

    s = command("retire", help="delete a version record (refused while it has traffic)")
    s.add_argument("model")
    s.add_argument("version")
    return p


def _import_flags(s: argparse.ArgumentParser) -> None:
    # Defaults are None: what the checkpoint says (and `publish` can tell them given without --from-hf).
    s.add_argument("--task", choices=importer.TASKS,
                   help="classify, embed, rerank, tokens or sparse, instead of what the checkpoint is (a "
                        "*ForSequenceClassification classifies, a *ForTokenClassification labels each token, a "
                        "sentence-transformers CrossEncoder reranks pairs, a SparseEncoder is sparse (SPLADE), "
                        "others embed; sparse imports a *ForMaskedLM as SPLADE)")
    s.add_argument("--pairs", action="store_true", default=None,
                   help="the classifier reads pairs of texts (TEXT and TEXT_PAIR; a cross-encoder); --task rerank "
                        "is the same")
    s.add_argument("--max-seq-len", type=_seq_len, metavar="N",
                   help="tokens per text the bundle keeps (default: what the checkpoint truncates at, within its "
                        "positions)")
    s.add_argument("--pooling", choices=importer.POOLING_CHOICES,
                   help="an embedding model's pooling (default: the sentence-transformers directory's, else mean)")
    s.add_argument("--matryoshka-dims", type=_widths, metavar="D1,D2,...",
                   help="an embedding model trained to be truncated (Matryoshka, e.g. sentence-transformers' "
                        "MatryoshkaLoss): the narrower widths it was trained for, descending, e.g. 256,128,64; "
                        "calls may then ask for one (`dimensions`). The checkpoint records none: say it here")
    s.add_argument("--external-data-mb", type=_mib, metavar="MB",
                   help=f"weights past MB MiB go in model.onnx.data beside model.onnx (ONNX external data; one "
                        f"model.onnx holds at most 2 GiB): default {EXTERNAL_DATA_ABOVE >> 20}, 0 for any model")


def _gate_flags(s: argparse.ArgumentParser) -> None:
    # Defaults are None so that `publish` can tell a gate flag given without --optimize.
    d = GateSettings()
    s.add_argument("--min-margin", type=_fraction, metavar="P",
                   help=f"texts whose source top-1 probability leads the runner-up by >= P are decisive "
                        f"(default {d.min_margin:g})")
    # %% in help: argparse %-formats it.
    s.add_argument("--min-agreement", type=_fraction, metavar="F",
                   help=f"refuse when the one-sided {d.confidence:.0%}% {BOUND_METHOD} lower bound on argmax "
                        f"agreement over the decisive texts is below F (default {d.min_agreement:g}, which takes at "
                        f"least {decisive_needed(d.min_agreement, d.confidence)} decisive texts)")
    s.add_argument("--max-accuracy-drop", type=_points, metavar="POINTS",
                   help=f"with labelled eval texts: refuse when accuracy falls by more than POINTS percentage points "
                        f"(default {d.max_accuracy_drop:g})")
    s.add_argument("--accept-accuracy-loss", action="store_true", default=None,
                   help="write the optimised bundle even when the gate refuses (the report records it)")
    s.add_argument("--speed-rounds", type=_rounds, metavar="N",
                   help=f"after judging, time both models over the eval texts in up to N rounds, each batch keeping "
                        f"its best (default {d.speed_rounds}; none starts after {d.speed_budget_s:g} s): the "
                        f"report's texts/s. 0 skips the timing, which the verdict does not read, for pipelines that "
                        f"do not read it either")


def _gate_settings(args: argparse.Namespace) -> GateSettings:
    given = {name: getattr(args, name) for name in GATE_FLAGS if getattr(args, name) is not None}
    if given and args.command == "publish" and args.optimize is None:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"{flags}: the accuracy gate runs only with --optimize LEVEL")
    try:
        return GateSettings(**given)
    except ValueError as e:
        raise UsageError(str(e)) from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except (UsageError, importer.CheckpointError, importer.DestinationError, importer.MissingDependency) as e:
        return _fail(EXIT_USAGE, str(e))
    except (Refused, BundleError, ArtifactError, StoreRefused, OptimizeError, importer.ParityRefused,
            importer.ExportError) as e:
        return _fail(EXIT_REFUSED, str(e))
    except StoreUnavailable as e:
        return _fail(EXIT_UNAVAILABLE, f"registry unreachable: {e}")
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
    except Exception as e:  # the promise is one line, never a traceback
        return _fail(EXIT_REFUSED, f"unexpected error: {type(e).__name__}: {e}")


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "optimize":  # a local file operation: no registry address to resolve
        _optimize(args.bundle, args.out, args.optimize, gate=_gate_settings(args), as_json=args.json)
        return EXIT_OK
    if args.command == "import":  # as is this one
        _import(args.source, args.out, args, as_json=args.json)
        return EXIT_OK
    if args.command == "publish" and args.from_hf is None:
        flags = ("task", "max_seq_len", "pooling", "pairs", "matryoshka_dims", "external_data_mb")
        given = [flag for flag in flags if getattr(args, flag) is not None]
        if given:
            raise UsageError(f"{', '.join('--' + g.replace('_', '-') for g in given)}: import options apply with "
                             "--from-hf DIR")
    url = registry_url(args.registry)
    try:
        address = parse_registry_url(url)
        for name in ("model", "version"):
            if getattr(args, name, None) is not None:
                check_name(name, getattr(args, name))
        weights = _parse_weights(args.weights) if args.command == "route" else {}
        shadow = _parse_shadow(args.shadow) if args.command == "route" and args.shadow else None
        gate = _gate_settings(args) if args.command == "publish" else None
    except (ValueError, RecordError) as e:
        raise UsageError(str(e)) from None

    from ortserve.registry.connect import open_store

    store = open_store(url)
    try:
        if args.command == "publish":
            artifacts = _artifact_store(args.artifacts, address)
            with contextlib.ExitStack() as scratch:
                bundle_dir, optimized, imported = args.bundle, None, None
                if args.from_hf is not None and args.optimize is not None:
                    _check_optimizable(args)  # before the import's minutes of work
                if args.from_hf is not None:  # import into a temp dir (and optimise that, or publish it), remove it
                    tmp = scratch.enter_context(tempfile.TemporaryDirectory(prefix="registry-import-"))
                    bundle_dir = str(Path(tmp) / "bundle")
                    imported = _import(args.from_hf, bundle_dir, args, as_json=args.json, print_summary=False)
                if args.optimize is not None:  # optimise into a temp dir, publish that, remove it
                    assert gate is not None
                    source_dir = bundle_dir
                    tmp = scratch.enter_context(tempfile.TemporaryDirectory(prefix="registry-optimize-"))
                    bundle_dir = str(Path(tmp) / "bundle")
                    # With --json the summary goes out inside the publish document below.
                    optimized = _optimize(source_dir, bundle_dir, args.optimize, gate=gate, as_json=args.json,
                                          print_summary=not args.json)
                result = publish(store, artifacts, model=args.model, version=args.version,
                                 bundle_dir=bundle_dir, weight=args.weight)
            rec = result.record
            if args.json:
                doc = {"model": rec.model, "version": rec.version, "sha256": rec.artifact.sha256,
                       "size": rec.artifact.size, "already_published": result.already_published,
                       "routing": dict(result.routing.weights) if result.routing else None,
                       "optimize": optimized.summary() if optimized else None,
                       "import": imported.summary() if imported else None}
                print(json.dumps(doc, indent=2, sort_keys=True))
            elif result.already_published:
                print(f"{rec.model}/{rec.version} already published (sha256 {rec.artifact.sha256[:12]}); "
                      f"nothing changed")
            else:
                print(f"published {rec.model}/{rec.version} (sha256 {rec.artifact.sha256[:12]}, "
                      f"{rec.artifact.size} bytes)")
                if args.weight is not None and result.routing is not None:
                    print(f"routing {rec.model}: {format_weights(result.routing.weights)}")
        elif args.command == "route":
            routing = route(store, args.model, weights, shadow=shadow)
            print(f"routing {args.model}: {_weights_line(routing)}")
        elif args.command == "rollout":
            return _rollout(store, args)
        elif args.command == "rollback":
            routing = rollback(store, args.model)
            print(f"rolled back {args.model}: {format_weights(routing.weights)}")
        elif args.command == "retire":
            retire(store, args.model, args.version)
            print(f"retired {args.model}/{args.version} (its artifact is kept)")
        elif args.command == "show":
            state = read_model_state(store, args.model)
            if not state.exists and not state.problems:
                raise Refused(f"unknown model {args.model!r}")
            _show(state, stepper.read(store, args.model).rollout, as_json=args.json,
                  seen=stepper.figures(store, args.model))
        elif args.command == "list":
            _list(store, as_json=args.json)
    finally:
        store.close()
    return EXIT_OK


def _optimize(source: str, dest: str, level: str, *, gate: GateSettings, as_json: bool,
              print_summary: bool = True) -> OptimizeResult:
    """Optimises, printing the steps, the gate's table and a summary line, or (as_json) only the JSON summary;
    a refusal prints the gate's report either way before it raises."""
    try:
        result = optimize_bundle(source, dest, level, progress=None if as_json else _print_now, gate=gate)
    except GateRefused as e:
        if as_json:  # the report goes out either way; the one-line reason goes to stderr as usual
            print(json.dumps({"refused": str(e), "gate": e.report.to_dict()}, indent=2, sort_keys=True))
        raise
    if result.gate is not None and result.gate.accepted_loss:
        print(f"registry: warning: the {level} model failed the accuracy gate and is written anyway "
              f"(--accept-accuracy-loss): {'; '.join(result.gate.refusals)}", file=sys.stderr)
    if as_json:
        if print_summary:
            print(json.dumps(result.summary(), indent=2, sort_keys=True))
        return result
    before, after = result.ops_before, result.ops_after
    changed = [f"{op} x {before.get(op, 0)} -> {after[op]}" for op in FUSED_OPS + QUANTIZED_OPS if after.get(op)]
    ops = f"{', '.join(changed)}; " if changed else ""  # bf16 changes no node: the graph stays the source's
    print(f"optimised {source} -> {dest}: level {level}, precision {result.manifest.precision}; "
          f"{ops}nodes {sum(before.values())} -> {sum(after.values())}; "
          f"model.onnx {format_bytes(result.size_before)} -> {format_bytes(result.size_after)} ({result.seconds:.1f}s)")
    return result


def _import(source: str, dest: str, args: argparse.Namespace, *, as_json: bool,
            print_summary: bool = True) -> importer.ImportResult:
    """Imports, printing the steps, the parity table and a summary line, or (as_json) only the JSON summary; a
    refusal prints the parity report either way before it raises. Warnings go to stderr."""
    try:  # torch and transformers load inside: `registry` itself never imports them
        result = importer.import_checkpoint(source, dest, task=args.task, max_seq_len=args.max_seq_len,
                                            pooling=args.pooling, pairs=args.pairs,
                                            matryoshka_dims=args.matryoshka_dims,
                                            progress=None if as_json else _print_now,
                                            external_data_above=(EXTERNAL_DATA_ABOVE if args.external_data_mb is None
                                                                 else args.external_data_mb << 20))
    except importer.ParityRefused as e:
        if as_json:
            print(json.dumps({"refused": str(e), "parity": e.report.to_dict()}, indent=2, sort_keys=True))
        raise
    for warning in result.warnings:
        print(f"registry: warning: {warning}", file=sys.stderr)
    if as_json:
        if print_summary:
            print(json.dumps(result.summary(), indent=2, sort_keys=True))
        return result
    m = result.manifest
    what = (f"labels {', '.join(m.labels)}" if m.spec.labelled else f"vocabulary {m.dim}" if m.spec.sparse
            else f"dim {m.dim}")
    if m.per_token:
        what += ", one per token"
    print(f"imported {source} -> {dest}: {result.checkpoint.class_name}, {m.format} ({what}), max_seq_len "
          f"{m.max_seq_len}, model.onnx {format_bytes(result.model_bytes)} ({result.seconds:.1f}s)")
    return result


def _check_optimizable(args: argparse.Namespace) -> None:
    """`publish --from-hf DIR --optimize LEVEL`: refuses a checkpoint the optimiser would refuse once imported, reading
    the directory only (no torch)."""
    checkpoint = read_checkpoint(args.from_hf, task=args.task, pooling=args.pooling, pairs=args.pairs)
    if checkpoint.per_token:
        raise OptimizeError(f"{args.from_hf}: {TOKEN_CLASSIFIER_REFUSAL}")
    if checkpoint.kind.sparse:
        raise OptimizeError(f"{args.from_hf}: {SPARSE_REFUSAL}")


def _print_now(line: str) -> None:
    # Flushed: the gate's progress lines are the only sign of life for the seconds each model runs.
    print(line, flush=True)


def _optimized(record: VersionRecord) -> str:
    """`show`'s OPTIMIZED cell: level (precision, source model sha256); "-" for a plain fp32 bundle."""
    opt = record.manifest.optimization
    if opt is None:
        return "-" if record.manifest.precision == "fp32" else record.manifest.precision
    return f"{opt.level} ({record.manifest.precision}, from {opt.source_sha256[:12]})"


def _artifact_store(explicit: str | None, address: Any) -> ArtifactStore:
    url = explicit or os.environ.get(ARTIFACTS_ENV)
    try:
        if url:
            return ArtifactStore.from_url(url)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if isinstance(address, FileAddress):
        return ArtifactStore(address.root / "artifacts")
    raise UsageError(f"a Consul registry needs --artifacts file:///shared/path (or ${ARTIFACTS_ENV})")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number 0..1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be 0..1, got {text}")
    return value


def _points(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of percentage points, got {text!r}") from None
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"must be 0..100 percentage points, got {text}")
    return value


def _widths(text: str) -> list[int]:
    """--matryoshka-dims: comma-separated positive integers (each checked against the model's width at import)."""
    try:
        widths = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths separated by commas, e.g. 256,128,64; got {text!r}") \
            from None
    if any(w < 1 for w in widths):
        raise argparse.ArgumentTypeError(f"widths must be positive integers, got {text!r}")
    return widths


def _seq_len(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not MIN_SEQ_LEN <= value <= MAX_SEQ_LEN:
        raise argparse.ArgumentTypeError(f"must be {MIN_SEQ_LEN}..{MAX_SEQ_LEN}, got {value}")
    return value


def _whole_number(unit: str, zero: str) -> Callable[[str], int]:
    """An argparse type: a whole number >= 0 of `unit`; `zero` says what 0 means."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number of {unit}, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0 (0: {zero}), got {value}")
        return value

    return parse


_rounds = _whole_number("rounds", "no timing")
_mib = _whole_number("MiB", "any model keeps its weights beside it")


def _percent(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 0..100, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be 0..100, got {value}")
    return value


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _steps(text: str) -> tuple[int, ...]:
    try:
        return parse_steps(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parse_shadow(item: str) -> tuple[str, int]:
    version, sep, value = item.partition("=")
    if not sep or not value.isdigit():
        raise UsageError(f"--shadow {item!r} must look like VERSION=PERCENT (e.g. v2=10)")
    return check_name("version", version), int(value)


def _rollout(store: Store, args: argparse.Namespace) -> int:
    """`registry rollout`: start (and with --wait follow), --step, --abort."""
    if args.abort or args.step:
        if args.version is not None:
            raise UsageError("--abort and --step take the model only")
        if args.abort:
            done = stepper.abort(store, args.model, "aborted with `registry rollout --abort`")
            print(f"aborted the rollout of {args.model}/{done.plan.candidate}: routing "
                  f"{format_weights(done.weights())}")
            return EXIT_OK
        rollout, decision = stepper.step(store, args.model)
        print(_decision_line(args.model, rollout, decision))
        return EXIT_OK if rollout is None or rollout.status in ("running", "promoted") else EXIT_REFUSED
    if args.version is None:
        raise UsageError("name the candidate: registry rollout MODEL VERSION")
    stable = args.stable
    if stable is None:
        routing = read_model_state(store, args.model).routing
        full = [v for v, w in (routing.weights if routing else {}).items() if w == 100]
        if not full:
            raise Refused(f"{args.model} has no version with 100% of the traffic; name the stable one with --from")
        stable = full[0]
    try:
        plan = Plan(model=args.model, stable=stable, candidate=args.version, steps=args.steps,
                    interval_s=args.interval, shadow_s=args.shadow, shadow_percent=args.shadow_percent,
                    checks=Checks(min_agreement=args.min_agreement, max_error_rate=args.max_error_rate,
                                  max_p99_ratio=args.max_p99_ratio, min_calls=args.min_calls,
                                  min_judged=args.min_judged))
    except RecordError as e:
        raise UsageError(str(e)) from None
    started = stepper.start(store, plan)
    print(f"rollout {started.id} of {args.model}: {stable} -> {args.version}, stages "
          f"{', '.join(f'{s.name} for {s.hold_s:g}s' for s in plan.stages())}")
    if not args.wait:
        return EXIT_OK
    while True:
        rollout, decision = stepper.step(store, args.model)
        if not isinstance(decision, Hold) or rollout is None or not rollout.running:
            print(_decision_line(args.model, rollout, decision), flush=True)
        if rollout is None or rollout.id != started.id or not rollout.running:
            return EXIT_OK if rollout is not None and rollout.status == "promoted" else EXIT_REFUSED
        time.sleep(WAIT_POLL_S)


def _decision_line(model: str, rollout: Rollout | None, decision: Decision) -> str:
    if rollout is None:
        return f"{model}: no rollout"
    if rollout.running:
        what = decision.why if isinstance(decision, Hold) else rollout.story[-1].event
        return f"{model}/{rollout.plan.candidate}: {rollout.current.name}: {what}"
    last = rollout.story[-1]
    return f"{model}/{rollout.plan.candidate}: {rollout.status.replace('_', ' ')} at {last.stage}: {last.detail}"


def _parse_weights(items: Sequence[str]) -> dict[str, int]:
    weights: dict[str, int] = {}
    for item in items:
        version, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"weight {item!r} must look like VERSION=PERCENT (e.g. v1=95)")
        check_name("version", version)
        try:
            weight = int(value)
        except ValueError:
            raise UsageError(f"weight {item!r}: {value!r} is not an integer") from None
        if weight < 0:
            raise UsageError(f"weight {item!r}: must be >= 0")
        if version in weights:
            raise UsageError(f"version {version!r} given twice")
        weights[version] = weight
    return weights


def _show(state: ModelState, rollout: Rollout | None, *, as_json: bool, seen: list[Figures]) -> None:
    weights = state.routing.weights if state.routing else {}
    current = summed(seen, rollout.id, rollout.stage) if rollout is not None else None
    if as_json:
        doc = {
            "model": state.model,
            "versions": {v: {**r.to_dict(), "weight": weights.get(v, 0)} for v, r in sorted(state.versions.items())},
            "routing": state.routing.to_dict() if state.routing else None,
            "problems": state.problems,
        }
        if rollout is not None and current is not None:  # models that never rolled out keep the old shape
            doc["rollout"] = {**rollout.to_dict(), "figures": {**current.to_dict(), "replicas": current.replicas}}
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    print(f"model {state.model}")
    print(f"routing: {_routing_line(state.routing)}")
    if rollout is not None and current is not None:
        p = rollout.plan
        stage = f", {rollout.current.name}" if rollout.running else ""
        print(f"rollout {rollout.id}: {p.stable} -> {p.candidate}, {rollout.status.replace('_', ' ')}{stage}"
              + (f": {rollout.reason}" if rollout.reason else ""))
        if rollout.running:
            print(f"  this stage: {describe(current)}")
        for step in rollout.story:
            when = dt.datetime.fromtimestamp(step.at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            print(f"  {when}  {step.event:<11}  {step.stage:<12}  {step.detail}".rstrip())
    rows = [("VERSION", "WEIGHT", "SHA256", "SIZE", "CREATED", "BY", "LABELS", "OPTIMIZED")]
    for v, r in sorted(state.versions.items()):
        rows.append((v, str(weights.get(v, 0)), r.artifact.sha256[:12], str(r.artifact.size), r.created_at,
                     r.created_by, _labels(r), _optimized(r)))
    _table(rows)
    for key, problem in sorted(state.problems.items()):
        print(f"warning: unreadable record {key}: {problem}", file=sys.stderr)


def _labels(record: VersionRecord) -> str:
    """`show`'s LABELS cell: a classifier's labels, a token classifier's (marked per token), or an embedding model's
    width."""
    manifest = record.manifest
    if manifest.per_token:
        return f"{','.join(manifest.labels)} (per token)"
    if manifest.spec.sparse:
        return f"(sparse embedding, vocabulary {manifest.dim})"
    return ",".join(manifest.labels) if manifest.spec.labelled else f"(embedding, dim {manifest.dim})"


def _list(store: Store, *, as_json: bool) -> None:
    states = [read_model_state(store, m) for m in list_models(store)]
    if as_json:
        docs = []
        for s in states:
            doc: dict[str, Any] = {"model": s.model, "versions": sorted(s.versions),
                                   "routing": dict(s.routing.weights) if s.routing else None}
            # Only models with optimised versions get the key, so plain listings keep their old shape.
            optimized = {v: r.manifest.provenance() for v, r in s.versions.items()
                         if r.manifest.optimization is not None or r.manifest.precision != "fp32"}
            if optimized:
                doc["optimized"] = optimized
            docs.append(doc)
        print(json.dumps(docs, indent=2, sort_keys=True))
        return
    rows = [("MODEL", "VERSIONS", "ROUTING")]
    rows += [(s.model, ",".join(_version_cell(v, r) for v, r in sorted(s.versions.items())) or "-",
              _routing_line(s.routing)) for s in states]
    _table(rows)


def _version_cell(version: str, record: VersionRecord) -> str:
    opt = record.manifest.optimization
    return f"{version}[{opt.level}]" if opt is not None else version


def _routing_line(routing: Routing | None) -> str:
    if routing is None:
        return "none"
    extra = f" (updated {routing.updated_at} by {routing.updated_by}" if routing.updated_at else " ("
    return f"{_weights_line(routing)}{extra}; {len(routing.history)} earlier)"


def _weights_line(routing: Routing) -> str:
    shadow = f" shadow {routing.shadow[0]}={routing.shadow[1]}%" if routing.shadow else ""
    return f"{format_weights(routing.weights)}{shadow}"


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _fail(code: int, message: str) -> int:
    print(f"registry: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
