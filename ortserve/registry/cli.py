"""The `registry` command: publish bundles and steer traffic. A thin shell over `publishing`.

Exit codes: 0 ok, 1 refused (the reason on stderr), 2 usage, 3 registry unreachable.
Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ortserve.registry.address import (
    FileAddress,
    parse_registry_url,
    registry_url,
)
from ortserve.registry.artifacts import ARTIFACTS_ENV, ArtifactError, ArtifactStore
from ortserve.registry.bundle import BundleError
from ortserve.registry.catalog import ModelState, list_models, read_model_state
from ortserve.registry.publishing import Refused, publish, retire, rollback, route
from ortserve.registry.records import RecordError, Routing, check_name, format_weights
from ortserve.registry.store import Store, StoreRefused, StoreUnavailable

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad command line input; exit 2."""


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="registry", description="Publish model bundles and steer traffic between versions.")
    p.add_argument("--registry", metavar="URL",
                   help="file:///path, file://./path or consul://host:8500?prefix=ortserve/ "
                        "(default: $ORTSERVE_REGISTRY or file://./model-store)")
    p.add_argument("--artifacts", metavar="URL",
                   help="file:// root of the artifact store (default: $ORTSERVE_ARTIFACTS, or "
                        "<file store root>/artifacts; required for Consul)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("publish", help="validate a bundle, upload it, record the version")
    s.add_argument("--model", required=True)
    s.add_argument("--version", required=True)
    s.add_argument("--bundle", required=True, metavar="DIR")
    s.add_argument("--weight", type=_percent, metavar="W", help="also route W%% to this version (one atomic write)")

    s = sub.add_parser("route", help="set traffic weights: registry route M v1=95 v2=5")
    s.add_argument("model")
    s.add_argument("weights", nargs="+", metavar="VERSION=PERCENT")

    s = sub.add_parser("rollback", help="restore the previous routing")
    s.add_argument("model")

    s = sub.add_parser("list", help="models, their versions and routing")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("show", help="one model's versions and routing")
    s.add_argument("model")
    s.add_argument("--json", action="store_true")

    s = sub.add_parser("retire", help="delete a version record (refused while it has traffic)")
    s.add_argument("model")
    s.add_argument("version")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except UsageError as e:
        return _fail(EXIT_USAGE, str(e))
    except (Refused, BundleError, ArtifactError, StoreRefused) as e:
        return _fail(EXIT_REFUSED, str(e))
    except StoreUnavailable as e:
        return _fail(EXIT_UNAVAILABLE, f"registry unreachable: {e}")
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
    except Exception as e:  # the promise is one line, never a traceback
        return _fail(EXIT_REFUSED, f"unexpected error: {type(e).__name__}: {e}")


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    url = registry_url(args.registry)
    try:
        address = parse_registry_url(url)
        for name in ("model", "version"):
            if getattr(args, name, None) is not None:
                check_name(name, getattr(args, name))
        weights = _parse_weights(args.weights) if args.command == "route" else {}
    except (ValueError, RecordError) as e:
        raise UsageError(str(e)) from None

    from ortserve.registry.address import open_store

    store = open_store(url)
    try:
        if args.command == "publish":
            artifacts = _artifact_store(args.artifacts, address)
            result = publish(store, artifacts, model=args.model, version=args.version,
                             bundle_dir=args.bundle, weight=args.weight)
            rec = result.record
            if result.already_published:
                print(f"{rec.model}/{rec.version} already published (sha256 {rec.artifact.sha256[:12]}); "
                      f"nothing changed")
            else:
                print(f"published {rec.model}/{rec.version} (sha256 {rec.artifact.sha256[:12]}, "
                      f"{rec.artifact.size} bytes)")
                if args.weight is not None and result.routing is not None:
                    print(f"routing {rec.model}: {format_weights(result.routing.weights)}")
        elif args.command == "route":
            routing = route(store, args.model, weights)
            print(f"routing {args.model}: {format_weights(routing.weights)}")
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
            _show(state, as_json=args.json)
        elif args.command == "list":
            _list(store, as_json=args.json)
    finally:
        store.close()
    return EXIT_OK


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


def _percent(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer 0..100, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be 0..100, got {value}")
    return value


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


def _show(state: ModelState, *, as_json: bool) -> None:
    weights = state.routing.weights if state.routing else {}
    if as_json:
        doc = {
            "model": state.model,
            "versions": {v: {**r.to_dict(), "weight": weights.get(v, 0)} for v, r in sorted(state.versions.items())},
            "routing": state.routing.to_dict() if state.routing else None,
            "problems": state.problems,
        }
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    print(f"model {state.model}")
    print(f"routing: {_routing_line(state.routing)}")
    rows = [("VERSION", "WEIGHT", "SHA256", "SIZE", "CREATED", "BY", "LABELS")]
    for v, r in sorted(state.versions.items()):
        rows.append((v, str(weights.get(v, 0)), r.artifact.sha256[:12], str(r.artifact.size), r.created_at,
                     r.created_by, ",".join(r.labels)))
    _table(rows)
    for key, problem in sorted(state.problems.items()):
        print(f"warning: unreadable record {key}: {problem}", file=sys.stderr)


def _list(store: Store, *, as_json: bool) -> None:
    states = [read_model_state(store, m) for m in list_models(store)]
    if as_json:
        print(json.dumps([{"model": s.model, "versions": sorted(s.versions),
                           "routing": dict(s.routing.weights) if s.routing else None} for s in states],
                         indent=2, sort_keys=True))
        return
    rows = [("MODEL", "VERSIONS", "ROUTING")]
    rows += [(s.model, ",".join(sorted(s.versions)) or "-", _routing_line(s.routing)) for s in states]
    _table(rows)


def _routing_line(routing: Routing | None) -> str:
    if routing is None:
        return "none"
    extra = f" (updated {routing.updated_at} by {routing.updated_by}" if routing.updated_at else " ("
    return f"{format_weights(routing.weights)}{extra}; {len(routing.history)} earlier)"


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _fail(code: int, message: str) -> int:
    print(f"registry: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
