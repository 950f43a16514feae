"""The `scripts/dev image` command line: `build` and `smoke`. Exit status 0 ok, 1 a step failed, 2 usage or host."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.image.pod_contract import ContractError
from ortserve_devtools.image.podman import ImageError, Log, UsageError

WORKDIR = ROOT / "build" / "image"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (scripts/dev image --help)")


def build_parser() -> argparse.ArgumentParser:
    from ortserve_devtools.image.build import default_tag

    parser = _Parser(prog="scripts/dev image", description="Build deploy/Dockerfile offline with podman (Debian bases "
                     "by mmdebstrap, a host-made wheelhouse) and smoke-test the image as deploy/k8s runs it.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    build = sub.add_parser("build", help="make the bases (once), the build inputs, the image; print its size")
    build.add_argument("--tag", default=default_tag(), help="image reference (default: %(default)s)")
    build.add_argument("--workdir", type=Path, default=WORKDIR,
                       help="mmdebstrap and build logs (default: build/image)")
    build.add_argument("--rebuild-base", action="store_true",
                       help="make the Debian bases again (today's security updates) even if podman has them")
    build.add_argument("--no-install", action="store_true",
                       help="do not apt-get install missing host tools (podman, runc, mmdebstrap); name them instead")
    smoke = sub.add_parser("smoke", help="run the image as the Deployment does and check it from outside")
    smoke.add_argument("--image", default=default_tag(), help="image reference (default: %(default)s)")
    smoke.add_argument("--port-offset", type=int, default=0,
                       help="add N to the manifests' ports (through ORTSERVE_PORT/_METRICS_PORT) when they are "
                            "taken on this host; the container shares the host's network")
    smoke.add_argument("--keep", action="store_true", help="keep the work directory (logs, registry, volumes)")
    smoke.add_argument("--workdir", type=Path, help="parent of the work directory (default: the system temp)")
    return parser


def main(argv: list[str] | None = None) -> int:
    log = Log()
    try:
        args = build_parser().parse_args(argv)
        if args.command == "build":
            from ortserve_devtools.image.build import build

            build(log, tag=args.tag, workdir=args.workdir, rebuild_base=args.rebuild_base,
                  install_tools=not args.no_install)
            log(f"image build done in {log.elapsed():.0f} s")
        else:
            if args.port_offset < 0 or args.port_offset > 50000:
                raise UsageError(f"--port-offset {args.port_offset}: expected 0..50000")
            from ortserve_devtools.image.smoke import smoke

            result = smoke(log, image=args.image, workdir=args.workdir, port_offset=args.port_offset,
                           keep=args.keep)
            log("image smoke passed in {:.0f} s: {}".format(
                log.elapsed(), ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.steps)))
    except UsageError as e:
        print(f"scripts/dev image: {e}", file=sys.stderr)
        return 2
    except (ImageError, ContractError) as e:
        print(f"scripts/dev image: FAILED after {log.elapsed():.0f} s: {e}", file=sys.stderr)
        return 1
    return 0
