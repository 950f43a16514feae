"""What takes the space in an image, and what dropping a dependency would save.

The image's filesystem is read through `podman image mount`. Files outside the venv are the Debian base; inside it
each installed distribution owns the files its dist-info RECORD lists (its .pyc included), so sizes are per
distribution, not per directory guess. A dependency's saving is its own size plus every distribution that only it
needs (nothing else left installed requires it).
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ortserve_devtools.image.podman import inspect_image, podman

VENV = Path("opt/venv")
SITE = VENV / "lib" / "python3.11" / "site-packages"
# Optional parts of the image and what only they serve (the savings are computed, the reasons are ours).
DROPPABLE = {
    "onnx + sympy (registry publish/optimize only)": ("onnx", "sympy"),
    "huggingface-hub (tokenizers' dependency; ortserve never downloads from the Hub)": ("huggingface-hub",),
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Distribution:
    name: str
    size: int
    requires: frozenset[str]


@dataclass(frozen=True)
class SizeReport:
    reference: str
    total: int
    base: int
    venv: int
    base_parts: list[tuple[str, int]]
    distributions: list[Distribution]

    def saving(self, names: Iterable[str]) -> int:
        """Bytes saved by uninstalling `names` and every distribution only they need (from the ortserve root)."""
        by_name = {d.name: d for d in self.distributions}
        dropped = {canonical(n) for n in names}

        def reachable(skip: set[str]) -> set[str]:
            seen: set[str] = set()
            todo = ["ortserve"]
            while todo:
                name = todo.pop()
                if name in seen or name in skip or name not in by_name:
                    continue
                seen.add(name)
                todo.extend(by_name[name].requires)
            return seen

        kept = reachable(dropped)
        return sum(d.size for d in self.distributions if d.name in reachable(set()) - kept)

    def lines(self, top: int = 10) -> list[str]:
        out = [f"{self.reference}: {self.total / 1e6:.0f} MB ({self.total / 2**20:.0f} MiB)",
               f"  Debian base {self.base / 1e6:.0f} MB: "
               + ", ".join(f"{name} {size / 1e6:.0f}" for name, size in self.base_parts),
               f"  venv {self.venv / 1e6:.0f} MB, largest distributions (MB): "
               + ", ".join(f"{d.name} {d.size / 1e6:.0f}" for d in self.distributions[:top])]
        for what, names in DROPPABLE.items():
            out.append(f"  without {what}: -{self.saving(names) / 1e6:.0f} MB")
        return out


def _tree_size(path: Path) -> int:
    if path.is_symlink() or not path.exists():
        return 0
    if path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def read_distributions(site: Path) -> list[Distribution]:
    """Every distribution installed in `site`, its size (its RECORD's files) and what it requires."""
    out = []
    for info in sorted(site.glob("*.dist-info")):
        meta = email.parser.Parser().parsestr((info / "METADATA").read_text(errors="replace"))
        requires = set()
        for line in meta.get_all("Requires-Dist") or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                requires.add(canonical(req.name))
        size = 0
        for row in (info / "RECORD").read_text().splitlines():
            relative = row.rsplit(",", 2)[0]
            target = (site / relative).resolve()
            if target.is_relative_to(site.parent.parent.parent) and target.is_file():
                size += target.stat().st_size
        out.append(Distribution(canonical(meta["Name"]), size, frozenset(requires)))
    return sorted(out, key=lambda d: -d.size)


def measure(root: Path, reference: str, total: int) -> SizeReport:
    """The report for an image whose filesystem is at `root`."""
    venv = _tree_size(root / VENV)
    base_parts = [(str(p), _tree_size(root / p)) for p in ("usr/lib/x86_64-linux-gnu", "usr/lib/python3.11")]
    everything = sum(_tree_size(p) for p in root.iterdir())
    base = everything - venv
    base_parts.append(("other", base - sum(size for _, size in base_parts)))
    return SizeReport(reference, total, base, venv, base_parts, read_distributions(root / SITE))


def image_report(reference: str) -> SizeReport:
    total = int(inspect_image(reference)["Size"])
    root = Path(podman("image", "mount", reference).stdout.strip())
    try:
        return measure(root, reference, total)
    finally:
        podman("image", "unmount", reference, check=False)
