"""deploy/Dockerfile and .dockerignore, checked without a Docker daemon.

The real file must pass dockerfile_problems and agree with the Kubernetes manifests (ports, uid,
config path); each mutation test breaks one line and asserts the checker names it.
"""

from __future__ import annotations

import dataclasses
import tomllib

import pytest
from dockerfile_check import (
    BuildFacts,
    DockerfileError,
    dockerfile_problems,
    exposed_ports,
    is_ignored,
    load_dockerignore,
    parse,
    runtime_cmd,
    runtime_copies,
    runtime_uid,
)
from manifest_files import DEPLOY_ROOT, REPO_ROOT, Manifest
from manifest_rules import container_ports, of_kind, pod_spec

DOCKERFILE = DEPLOY_ROOT / "Dockerfile"


def build_facts() -> BuildFacts:
    """What pyproject.toml tells the image build: commands, the files the backend reads, packages."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    skbuild = pyproject.get("tool", {}).get("scikit-build", {})
    cmake_dir = skbuild.get("cmake", {}).get("source-dir", ".")
    cmakelists = "CMakeLists.txt" if cmake_dir == "." else f"{cmake_dir.strip('./')}/CMakeLists.txt"
    readme = pyproject["project"].get("readme")
    inputs = {"pyproject.toml", cmakelists} | ({readme} if isinstance(readme, str) else set())
    # A CMakeLists.txt inside a package directory is copied with the package.
    packages = frozenset(skbuild.get("wheel", {}).get("packages", [pyproject["project"]["name"]]))
    inputs = {i for i in inputs if not any(i.startswith(p + "/") for p in packages)}
    return BuildFacts(
        REPO_ROOT,
        frozenset(pyproject["project"]["scripts"]),
        frozenset(inputs),
        packages,
        (REPO_ROOT / ".dockerignore").read_text(),
    )


def test_dockerfile_passes_every_check() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text(), build_facts()) == []


def test_dockerfile_is_multi_stage_on_the_agreed_base() -> None:
    args, stages = parse(DOCKERFILE.read_text())
    assert [s.name for s in stages] == ["builder", "runtime"]
    assert {s.base for s in stages} == {"python:3.11-slim-bookworm"}
    assert args["PYTHON_IMAGE"] == "python:3.11-slim-bookworm"
    # By default both stages use one base (the venv links to its python3); scripts/dev image passes two of its own.
    assert args["BUILDER_IMAGE"] == args["PYTHON_IMAGE"]


def test_image_agrees_with_the_deployments(cluster_objects: list[Manifest]) -> None:
    text = DOCKERFILE.read_text()
    deployments = of_kind(cluster_objects, "Deployment")
    assert deployments
    for dep in deployments:
        assert exposed_ports(text) == set(container_ports(dep).values()), dep.name
        assert pod_spec(dep)["securityContext"]["runAsUser"] == runtime_uid(text), dep.name
        # The manifests pass the same args as the image's CMD, so `docker run` and k8s agree.
        assert pod_spec(dep)["containers"][0]["args"] == runtime_cmd(text), dep.name


def test_default_config_is_baked_in_where_cmd_reads_it() -> None:
    text = DOCKERFILE.read_text()
    cmd = runtime_cmd(text)
    config_path = cmd[cmd.index("--config") + 1]
    (copy,) = [c for c in runtime_copies(text) if c.dest == config_path]
    (source,) = copy.sources
    settings = tomllib.loads((REPO_ROOT / source).read_text())
    assert (settings["http_port"], settings["port"], settings["metrics_port"]) == (8000, 8001, 8002)


@pytest.mark.parametrize(
    ("path", "ignored"),
    [
        (".venv/bin/python", True),
        ("build/cp311/CMakeCache.txt", True),
        ("tests/deploy/test_dockerfile.py", True),
        ("model-store/x/model.onnx", True),
        ("ortserve/service/__init__.py", False),
        ("ortserve/service/__pycache__/app.cpython-311.pyc", True),
        ("ortserve/engine_ext/_engine.cpython-311-x86_64-linux-gnu.so", True),
        ("scripts/fetch_ort_headers.sh", False),
        ("scripts/gen_proto", True),
        ("pyproject.toml", False),
        ("deploy/config/ortserve.toml", False),
        ("deploy/k8s/base/service.yaml", True),
        ("deploy/build-inputs/wheels/numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", False),
        ("deploy/build-inputs/ort-headers/usr/include/onnxruntime/onnxruntime_c_api.h", False),
    ],
)
def test_dockerignore_keeps_the_context_to_what_the_build_needs(path: str, ignored: bool) -> None:
    assert is_ignored(path, load_dockerignore(REPO_ROOT / ".dockerignore")) is ignored


MUTATIONS = [
    ("root-user", "USER 10001:10001", "USER root", "must be a numeric non-zero uid"),
    ("no-user", "USER 10001:10001\n", "", "no USER"),
    ("entrypoint", 'ENTRYPOINT ["ortserve"]', 'ENTRYPOINT ["python", "-m", "ortserve"]', "ENTRYPOINT must be"),
    ("shell-cmd", 'CMD ["serve", "--config", "/etc/ortserve/ortserve.toml"]', "CMD ortserve serve", "exec form"),
    ("copy-missing", "COPY ortserve ortserve", "COPY ortserv ortserve", "ortserv does not exist"),
    ("copy-from-typo", "COPY --from=builder", "COPY --from=biulder", "--from=biulder names no earlier stage"),
    ("unknown-instruction", "WORKDIR /src", "WORKDIRR /src", "unknown instruction WORKDIRR"),
    ("script-missing", "RUN scripts/fetch_ort_headers.sh", "RUN scripts/fetch_headers.sh", "not in the repository"),
    ("script-not-copied", "COPY scripts/fetch_ort_headers.sh scripts/fetch_ort_headers.sh\n", "", "before any COPY"),
    ("fat-runtime", "RUN groupadd", "RUN apt-get install -y g++ && groupadd", "installs build tools"),
    ("unpinned-base", "ARG PYTHON_IMAGE=python:3.11-slim-bookworm", "ARG PYTHON_IMAGE=python", "pinned tag"),
    ("no-venv-path", "ENV PATH=/opt/venv/bin:$PATH \\\n    PYTHONUNBUFFERED", "ENV PYTHONUNBUFFERED", "PATH"),
    ("package-not-copied", "COPY ortserve ortserve\n", "", "pip install runs without ['ortserve'] copied in"),
]


@pytest.mark.parametrize(("old", "new", "expected"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_checker_catches_a_broken_dockerfile(old: str, new: str, expected: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text, f"mutation anchor {old!r} is gone from the Dockerfile; update this test"
    problems = dockerfile_problems(text.replace(old, new, 1), build_facts())
    assert any(expected in p for p in problems), f"expected {expected!r} among {problems}"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("scripts/", "is excluded by .dockerignore"),
        ("ortserve/registry", "hides ['ortserve/registry/"),
    ],
    ids=["hides-a-copied-file", "hides-part-of-a-package"],
)
def test_checker_catches_a_dockerignore_that_hides_build_inputs(line: str, expected: str) -> None:
    facts = build_facts()
    facts = dataclasses.replace(facts, dockerignore=facts.dockerignore + f"\n{line}\n")
    problems = dockerfile_problems(DOCKERFILE.read_text(), facts)
    assert any(expected in p for p in problems), f"expected {expected!r} among {problems}"


def test_parser_rejects_what_is_not_a_dockerfile() -> None:
    with pytest.raises(DockerfileError, match="no FROM"):
        parse("RUN true\n".replace("RUN", "ARG"))
    with pytest.raises(DockerfileError, match="only ARG"):
        parse("RUN true\nFROM python:3.11\n")
    with pytest.raises(DockerfileError, match="continuation"):
        parse("FROM python:3.11\nRUN true \\\n")
    with pytest.raises(DockerfileError, match="has no default"):
        parse("ARG BASE\nFROM ${BASE}\n")
