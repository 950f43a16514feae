"""Imports flow one way: service → registry, service → engine_ext; never back (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import ortserve

PACKAGE = Path(ortserve.__file__).parent
FORBIDDEN = {
    "registry": ("ortserve.service", "ortserve.engine_ext", "grpc"),
    "engine_ext": ("ortserve.service", "ortserve.registry", "ortserve.devtools"),
    # The builders write bundles through the bundle room (registry.bundle, registry.references), nothing else.
    "devtools": ("ortserve.service", "ortserve.engine_ext"),
    "proto": ("ortserve.service", "ortserve.registry", "ortserve.engine_ext"),
}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_rooms_import_only_downstream() -> None:
    violations = []
    for room, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / room).rglob("*.py")):
            for name in imported_modules(path):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    violations.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not violations, violations
    assert any((PACKAGE / "registry").rglob("*.py")), "nothing scanned"


def test_the_check_catches_a_backward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ortserve.service.manager import ModelManager\nimport grpc\n")
    assert {"ortserve.service.manager", "grpc"} <= imported_modules(bad)
