"""Imports flow one way (ARCHITECTURE.md): service → registry → prepare → bundle, service → bundle, service →
engine_ext; never back, and the server never loads the offline preparation (import, optimise, the gate). No module
reaches itself through others. In C++ too: engine_ext/src/dataplane uses engine_ext/src/engine, never the reverse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ortserve

PACKAGE = Path(ortserve.__file__).parent
# The C++ sources as checked out (the installed package carries none).
ENGINE_SRC = Path(__file__).resolve().parents[1] / "ortserve" / "engine_ext" / "src" / "engine"
# The product never imports the tools (tools/ortserve_devtools: the bundle builders, the Consul stand-in, the server
# launcher and the load client, which the tests, the demo and the scripts use and the wheel does not carry).
FORBIDDEN = {
    "bundle": ("ortserve.service", "ortserve.registry", "ortserve.prepare", "ortserve.engine_ext", "grpc",
               "ortserve_devtools"),
    "prepare": ("ortserve.service", "ortserve.registry", "ortserve.engine_ext", "grpc", "ortserve_devtools"),
    "registry": ("ortserve.service", "ortserve.engine_ext", "grpc", "ortserve_devtools"),
    "engine_ext": ("ortserve.service", "ortserve.registry", "ortserve.bundle", "ortserve.prepare",
                   "ortserve_devtools"),
    "service": ("ortserve.prepare", "ortserve_devtools"),
    "proto": ("ortserve.service", "ortserve.registry", "ortserve.bundle", "ortserve.prepare", "ortserve.engine_ext"),
}
TOOLS = Path(__file__).resolve().parents[1] / "tools" / "ortserve_devtools"
# What the tools may use of the product: the builders write bundles through the bundle room and the preparation's
# reference answers (bundle, prepare); the server launcher and the load client speak the wire contract (proto) to a
# server they run as a process. Never the server's insides (service, engine_ext) nor the registry's stores.
TOOLS_ALLOWED = ("ortserve", "ortserve.bundle", "ortserve.prepare", "ortserve.proto")


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
    assert all(any((PACKAGE / room).rglob("*.py")) for room in FORBIDDEN), "nothing scanned"


def imported_here(path: Path) -> set[str]:
    """What a file imports: `import a.b` as a.b, `from a import b` as a.b (b may be a module; the graph trims it
    back to a where it is a name)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports (lazy imports inside functions too). A
    compiled module is known by its stub (.pyi) and imports nothing of the package."""
    modules = {module_name(path) for path in package.rglob("*.pyi")}
    paths = {module_name(path): path for path in package.rglob("*.py")}
    modules |= set(paths)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in paths.items():
        for imported in imported_here(path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                graph[name].add(imported)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_reaches_itself_through_others() -> None:
    graph = import_graph(PACKAGE)
    assert not circles(graph), circles(graph)
    assert "ortserve.bundle.manifest" in graph["ortserve.bundle.references"], "nothing scanned"


def test_the_circle_check_sees_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def tools_violations(paths: list[Path]) -> list[str]:
    """Imports of the product outside TOOLS_ALLOWED (`ortserve` itself only as the package, not a submodule)."""
    def allowed(name: str) -> bool:
        return name == "ortserve" or any(name == a or name.startswith(a + ".") for a in TOOLS_ALLOWED[1:])

    return [f"{path.name} imports {name}" for path in paths for name in imported_modules(path)
            if (name == "ortserve" or name.startswith("ortserve.")) and not allowed(name)]


def test_the_tools_use_only_the_bundle_room_and_the_wire_and_stay_out_of_the_wheel() -> None:
    """The modules the suite shares with the tools (TOOLS' own files). The commands' packages under it (bench/, soak/,
    fuzz/, replicas/, image/, gpu/: what scripts/dev runs) measure and drive the product and may use any room of it,
    as a user's script would; none of the product imports them either (FORBIDDEN)."""
    paths = sorted(TOOLS.glob("*.py"))
    assert (TOOLS / "bench" / "serve.py").is_file() and (TOOLS / "launcher.py") in paths
    assert not tools_violations(paths), tools_violations(paths)
    assert (TOOLS / "bert_bundle.py").is_file() and (TOOLS / "server_process.py").is_file(), "nothing scanned"
    assert not (PACKAGE / "devtools").exists()  # the installed package carries the product only


def test_the_check_catches_a_backward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ortserve.service.manager import ModelManager\nimport grpc\n")
    assert {"ortserve.service.manager", "grpc"} <= imported_modules(bad)
    tool = tmp_path / "tool.py"
    tool.write_text("import ortserve\nfrom ortserve.proto import grpc_service_pb2\nimport ortserve.engine_ext\n")
    assert tools_violations([tool]) == ["tool.py imports ortserve.engine_ext"]


def quoted_includes(path: Path) -> list[str]:
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.MULTILINE)


def test_the_engine_room_includes_only_its_own_headers() -> None:
    """engine/ knows nothing of dataplane/ (nor of the build's front-end switch): the module root, src/module.cc,
    binds both rooms."""
    own = {path.name for path in ENGINE_SRC.iterdir()}
    violations = [f"{path.name} includes {name}" for path in sorted(ENGINE_SRC.iterdir())
                  if path.suffix in {".h", ".cc"} for name in quoted_includes(path) if name not in own]
    assert not violations, violations
    assert "engine.h" in own, "nothing scanned"
    assert "batcher.h" in quoted_includes(ENGINE_SRC.parent / "dataplane" / "served_version.h")  # the check sees one


def test_the_server_and_the_registry_command_never_load_torch() -> None:
    """PyTorch, transformers and sentence-transformers are the `import` extra: only `registry import` loads them."""
    import subprocess
    import sys
    import tomllib

    heavy = ("torch", "transformers", "sentence_transformers")
    code = ("import sys; import ortserve.service.app, ortserve.service.cli, ortserve.registry.cli, "
            "ortserve.prepare.importer; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{heavy!r}))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].split(";")[0].strip() for dep in project["dependencies"]}
    assert not names & {"torch", "transformers", "sentence-transformers"}
    assert {"torch", "transformers", "sentence-transformers"} <= {
        dep.split(">")[0].split("<")[0].split("=")[0] for dep in project["optional-dependencies"]["import"]}
