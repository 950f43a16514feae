"""The `ortserve` command: `serve` runs the server, `status` asks a running one what it serves."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ortserve import __version__
from ortserve.service import config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ortserve", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ortserve {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the KServe V2 gRPC server",
        description="Serve a local bundle (--bundle DIR) or what a registry says (--registry URL). "
        "Settings come from defaults, then --config FILE (TOML or YAML), then ORTSERVE_* "
        "environment variables, then these flags.",
    )
    serve.add_argument("--config", default="", help="settings file (TOML, or YAML by extension)")
    config.add_arguments(serve)

    status = sub.add_parser("status", help="print a running server's versions, routing and load errors")
    status.add_argument("--address", default="localhost:8001", help="host:port of the gRPC server")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--timeout", type=float, default=5.0)
    status.add_argument("--api-key", default=None,
                        help="the server's API key, if it asks for one (default: the first of env ORTSERVE_API_KEY)")

    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _status(args)


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = config.load_settings(file=args.config, flags=config.flags_from(args))
    except config.ConfigError as e:
        print(f"ortserve: {e}", file=sys.stderr)
        return 2
    if not settings.bundle and not settings.registry:
        print("ortserve: nothing to serve: give --bundle DIR or --registry URL", file=sys.stderr)
        return 2
    try:
        run = loop_runner(settings.event_loop)
    except ImportError as e:
        print(f"ortserve: event_loop=uvloop but uvloop is not installed ({e})", file=sys.stderr)
        return 2
    # Imported late: `ortserve status` and config errors need neither the engine nor the registry.
    from ortserve.service.app import ListenError, Server, bundle_source
    from ortserve.service.logs import configure_logging
    from ortserve.service.native_frontend import NativeFrontendUnavailable, check_available

    if settings.frontend == "native":
        try:
            check_available()
        except NativeFrontendUnavailable as e:
            print(f"ortserve: {e}", file=sys.stderr)
            return 2

    from ortserve.service.tracing import TracingUnavailable

    configure_logging(level=settings.log_level, fmt=settings.log_format)
    try:
        if settings.bundle:
            server = Server(settings, source=bundle_source(settings))
        else:
            from ortserve.service.registry_source import registry_source

            source, fetch = registry_source(settings)
            server = Server(settings, source=source, fetch=fetch)
    except (TracingUnavailable, config.ConfigError) as e:  # ConfigError: api_key_file, read as the server starts
        print(f"ortserve: {e}", file=sys.stderr)
        return 2
    try:
        run(server.serve_until_signal())
    except ListenError as e:
        print(f"ortserve: {e}", file=sys.stderr)
        return 2
    return 0


def loop_runner(kind: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """`asyncio.run` or `uvloop.run` for event_loop = asyncio | uvloop | auto (uvloop when installed)."""
    if kind == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise
        return asyncio.run
    return uvloop.run


def _status(args: argparse.Namespace) -> int:
    import grpc

    from ortserve.service.app import ADMIN_STATUS_METHOD

    key = args.api_key if args.api_key is not None else os.environ.get("ORTSERVE_API_KEY", "").split(",")[0].strip()
    try:
        with grpc.insecure_channel(args.address) as channel:
            call = channel.unary_unary(
                ADMIN_STATUS_METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            metadata = [("authorization", f"Bearer {key}")] if key else None
            status = json.loads(call(b"", timeout=args.timeout, metadata=metadata))
    except grpc.RpcError as e:
        print(f"ortserve: cannot reach {args.address}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    serving = status.get("serving", {})
    if "bundle" in serving:
        print(f"serving the bundle {serving['bundle']}")
    else:
        print(f"registry {serving.get('registry', '')} at index {status['registry_index']}".replace("  ", " "))
    frontend = status.get("frontend", {})
    passed = {reason: n for reason, n in frontend.get("passthrough", {}).items() if n}
    print(f"front end {frontend.get('kind', '?')}"
          + (": passed on to Python " + ", ".join(f"{r}={n}" for r, n in sorted(passed.items())) if passed else ""))
    for model, info in status["models"].items():
        routing = " ".join(f"{v}={w}" for v, w in info["routing"].items()) or "(none)"
        if info.get("shadow"):
            routing += f" shadow {info['shadow']['version']}={info['shadow']['percent']}%"
        print(f"model {model}: routing {routing}")
        for pair in info.get("shadow_figures", []):
            print("  " + _shadow_line(pair))
        for version, v in info["versions"].items():
            compute = " ".join(f"{key}={str(v[key]).replace(' ', '-')}" for key in (
                "device", "precision", "runtime", "tokenizer", "memory_mb", "cuda_graphs") if v.get(key) is not None)
            if v.get("kind"):
                compute = f"{v['kind'].replace(' ', '-')} {compute}"
            if v.get("oom_errors"):
                compute += f" oom_errors={v['oom_errors']} fallback_runs={v.get('fallback_runs', 0)}"
            if v.get("verify"):
                compute += " " + _verify_cell(v["verify"])
            extra = f"  error: {v['error']}" if v.get("error") else ""
            if v.get("retrying"):
                extra += f" (attempt {v['attempts'] + 1} running)"
            print(f"  {version:<16} {v['state']:<9} leases={v.get('leases', 0)} {compute}{extra}".rstrip())
        if info.get("last_error"):
            print(f"  last error: {info['last_error']}")
    return 0


def _shadow_line(pair: dict[str, Any]) -> str:
    """`status`'s line for a shadow pair: the copies' outcomes, the agreement and the calls that disagree most."""
    counts = ", ".join(f"{k} {n}" for k, n in pair["outcomes"].items() if n)
    line = f"shadow {pair['stable']} -> {pair['candidate']}: {counts or 'no copies yet'}"
    if pair["judged"]:
        line += f"; agreement {pair['agreed']}/{pair['judged']} ({pair['agreement']:.4f})"
    if pair.get("concordance") is not None:
        line += f", rank concordance {pair['concordance']:.3f}"
    if pair["worst"]:
        line += "; most apart: " + " ".join(w["request_id"] for w in pair["worst"][:3])
    return line


def _verify_cell(verify: dict[str, Any]) -> str:
    """`status`'s outputs cell: the load-time check's result and its headline figure."""
    result = verify.get("result", "?")
    if "max_abs_delta" in verify:
        return f"outputs={result}(max|delta| {verify['max_abs_delta']:.2g}, {verify.get('texts', 0)} texts)"
    if "min_cosine" in verify:
        return f"outputs={result}(min cosine {verify['min_cosine']:.6f}, {verify.get('texts', 0)} texts)"
    return f"outputs={result}"


if __name__ == "__main__":
    sys.exit(main())
