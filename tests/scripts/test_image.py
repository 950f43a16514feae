"""scripts/dev image without building anything: its command line, what it reads from deploy/k8s, how it checks an image
against that and runs a container for it, the bases it makes, and its size arithmetic.

The build and the smoke themselves need podman and minutes (deploy/README.md, The image); here every rule they apply
is run on the repository's real manifests and Dockerfile, and each check is shown failing on a real mistake.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from ortserve_devtools.image import bases, build, build_inputs
from ortserve_devtools.image.container import run_arguments, volume_dir
from ortserve_devtools.image.pod_contract import (
    ContractError,
    ImageConfig,
    contract_of,
    expand,
    image_problems,
    publisher_contract,
    server_contract,
)
from ortserve_devtools.image.size_report import SizeReport, read_distributions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "deploy"))
from dockerfile_check import exposed_ports, parse, runtime_cmd, runtime_uid  # noqa: E402
from manifest_rules import load_toml_settings  # noqa: E402

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "dev"), "image", *args], capture_output=True,
                          text=True,
                          timeout=60)


@pytest.mark.parametrize(("args", "message"), [
    ((), "the following arguments are required: command"),
    (("bogus",), "invalid choice: 'bogus'"),
    (("smoke", "--port-offset", "-5"), "--port-offset -5: expected 0..50000"),
    (("build", "--tag"), "expected one argument"),
])
def test_bad_command_lines_exit_2_with_a_message(args: tuple[str, ...], message: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and done.stderr.startswith("scripts/dev image: ")


def test_smoke_names_a_missing_image() -> None:
    done = run_cli("smoke", "--image", "localhost/ortserve:no-such-tag")
    assert done.returncode == 2
    assert "no image localhost/ortserve:no-such-tag" in done.stderr or "missing" in done.stderr  # or no podman here


# ---- what the manifests say ------------------------------------------------------------------------------------


def dockerfile_image() -> ImageConfig:
    """The image config deploy/Dockerfile declares (what podman image inspect reports for a build of it)."""
    text = DOCKERFILE.read_text()
    _, stages = parse(text)
    (entry,) = stages[-1].of("ENTRYPOINT")
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(i.args for i in stages[-1].of("ENV"))))
    return ImageConfig(user=f"{runtime_uid(text)}:{runtime_uid(text)}", entrypoint=tuple(entry.exec_form() or ()),
                       cmd=tuple(runtime_cmd(text)), exposed_ports=frozenset(exposed_ports(text)), env=env)


def server_settings() -> dict[str, Any]:
    return tomllib.loads(server_contract().config_file()[1])


def test_the_server_contract_is_the_deployments() -> None:
    server = server_contract()
    assert (server.uid, server.gid, server.command) == (10001, 10001, None)
    assert server.ports == {"grpc": 8001, "http": 8000, "http-metrics": 8002}
    assert server.read_only_root and server.no_new_privileges and server.drop_capabilities == ("ALL",)
    assert server.grace_s == 30 and set(server.probes) == {"startupProbe", "readinessProbe", "livenessProbe"}
    path, text = server.config_file()
    assert path == "/etc/ortserve/ortserve.toml"
    settings = load_toml_settings(text)  # what the server itself accepts
    assert (settings.port, settings.http_port, settings.metrics_port, settings.models) == (8001, 8000, 8002,
                                                                                          ("sentiment",))
    mounts = {m.name: (m.path, m.read_only, m.kind) for m in server.mounts}
    assert mounts["cache"] == ("/var/cache/ortserve", False, "emptyDir")
    assert mounts["artifacts"] == ("/artifacts", True, "persistentVolumeClaim")
    assert server.env["ORTSERVE_ARTIFACTS"] == "file:///artifacts" and "CONSUL_HTTP_TOKEN" in server.secret_env


def test_the_publisher_contract_is_the_jobs() -> None:
    job = publisher_contract()
    assert job.command == ("registry",) and job.uid == 10001
    args = expand(job.args, job.env)
    assert args[:4] == ["--registry", job.env["ORTSERVE_REGISTRY"], "--artifacts", "file:///artifacts"]
    assert "publish" in args and {m.name: m.read_only for m in job.mounts}["bundles"] is True


def test_the_dockerfile_image_agrees_with_the_manifests() -> None:
    assert image_problems(server_contract(), dockerfile_image(), server_settings()) == []


IMAGE_MUTATIONS = [
    ("root", {"user": "0:0"}, "is not the pod's runAsUser 10001"),
    ("entrypoint", {"entrypoint": ("python", "-m", "ortserve")}, "ENTRYPOINT, which is ['python'"),
    ("cmd", {"cmd": ("serve",)}, "differ from the image's CMD ['serve']"),
    ("ports", {"exposed_ports": frozenset({8001})}, "the image exposes [8001]"),
    ("cache", {"env": {"ORTSERVE_ARTIFACT_CACHE": "/root/.cache"}}, "ORTSERVE_ARTIFACT_CACHE: the image says"),
]


@pytest.mark.parametrize(("change", "expected"), [m[1:] for m in IMAGE_MUTATIONS], ids=[m[0] for m in IMAGE_MUTATIONS])
def test_image_checks_name_the_mistake(change: dict[str, Any], expected: str) -> None:
    image = dataclasses.replace(dockerfile_image(), **change)
    found = image_problems(server_contract(), image, server_settings())
    assert any(expected in p for p in found), found


def _deployment() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "deploy/k8s/release/deployment.yaml").read_text())
              if d and d["kind"] == "Deployment"]
    return copy.deepcopy(doc)


def _configmaps() -> dict[str, dict[str, str]]:
    out = {}
    for path in (ROOT / "deploy/k8s/base").glob("*configmap.yaml"):
        for d in yaml.safe_load_all(path.read_text()):
            out[d["metadata"]["name"]] = d["data"]
    return out


def test_manifest_mistakes_are_named() -> None:
    doc = _deployment()
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    next(m for m in container["volumeMounts"] if m["name"] == "cache")["readOnly"] = True
    found = image_problems(contract_of(doc, _configmaps(), "test"), dockerfile_image(), server_settings())
    assert any("is on no writable volume" in p for p in found), found
    assert any("root filesystem is writable" in p for p in found), found

    doc = _deployment()
    doc["spec"]["template"]["spec"]["containers"][0]["args"] = ["serve", "--config", "/etc/other/ortserve.toml"]
    with pytest.raises(ContractError, match="is not in a mounted ConfigMap"):
        contract_of(doc, _configmaps(), "test").config_file()
    doc = _deployment()
    doc["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["key"] = "NOPE"
    with pytest.raises(ContractError, match="which deploy/k8s/base does not define"):
        contract_of(doc, _configmaps(), "test")


# ---- the container it runs ------------------------------------------------------------------------------------


def test_run_arguments_follow_the_contract(tmp_path: Path) -> None:
    server = server_contract()
    volumes = {m.name: volume_dir(m, tmp_path) for m in server.mounts}
    args = run_arguments(server, "localhost/ortserve:t", name="n", volumes=volumes,
                         env={"ORTSERVE_REGISTRY": "file:///registry"},
                         extra_volumes=[(tmp_path / "registry", "/registry", True)])
    assert args[args.index("--user") + 1] == "10001:10001"
    assert {"--read-only", "--network"} <= set(args) and args[args.index("--cap-drop") + 1] == "ALL"
    assert f"{volumes['config']}:/etc/ortserve:ro" in args and f"{volumes['cache']}:/var/cache/ortserve:rw" in args
    assert f"{tmp_path / 'registry'}:/registry:ro" in args and "ORTSERVE_REGISTRY=file:///registry" in args
    assert args[args.index("localhost/ortserve:t") + 1:] == list(server.args)
    assert (volumes["config"] / "ortserve.toml").read_text() == server.config_file()[1]
    assert oct(volumes["cache"].stat().st_mode & 0o777) == "0o777"  # an emptyDir: any uid writes
    with pytest.raises(ContractError, match=r"no host directory for the volumes \['tmp'\]"):
        run_arguments(server, "i", name="n", volumes={k: v for k, v in volumes.items() if k != "tmp"})
    job = publisher_contract()
    job_args = run_arguments(job, "i", name="j", volumes={m.name: tmp_path for m in job.mounts}, args=["show"])
    assert job_args[job_args.index("--entrypoint") + 1] == '["registry"]' and job_args[-2:] == ["i", "show"]


# ---- bases, build, sizes -----------------------------------------------------------------------------------------


def test_the_bases_carry_every_package_the_dockerfile_would_install() -> None:
    """With scripts/dev image's bases, deploy/Dockerfile's apt steps install nothing: the build needs no network."""
    _, stages = parse(DOCKERFILE.read_text())
    wanted = {s.name: set(re.search(r'pkgs="([^"]+)"', " ".join(i.args for i in s.of("RUN"))).group(1).split())
              for s in stages}  # type: ignore[union-attr]
    assert wanted["builder"] <= set(bases.BUILDER.packages), wanted["builder"] - set(bases.BUILDER.packages)
    assert wanted["runtime"] <= set(bases.RUNTIME.packages), wanted["runtime"] - set(bases.RUNTIME.packages)
    assert set(bases.RUNTIME.packages) <= set(bases.BUILDER.packages)  # one python3.11 in both
    assert bases.RUNTIME.key() != bases.BUILDER.key() and bases.RUNTIME.tag.startswith("localhost/ortserve-base:")


def test_package_version_reads_the_bases_dpkg_status(tmp_path: Path) -> None:
    status = (b"Package: libc6\nStatus: install ok installed\nVersion: 2.36\n\n"
              b"Package: python3.11\nStatus: install ok installed\nVersion: 3.11.2-6\nDescription: x\n more\n")
    tarball = tmp_path / "root.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("./var/lib/dpkg/status")
        info.size = len(status)
        tar.addfile(info, io.BytesIO(status))
    assert bases.package_version(tarball, "python3.11") == "3.11.2-6"
    with pytest.raises(Exception, match="perl is not installed"):
        bases.package_version(tarball, "perl")


def test_the_build_is_offline_on_both_bases() -> None:
    args = build.build_arguments("r:1", "b:1", "localhost/ortserve:x")
    assert args[args.index("--network") + 1] == "none"
    assert {"PYTHON_IMAGE=r:1", "BUILDER_IMAGE=b:1", "PIP_NO_INDEX=1"} <= set(args)
    assert build.default_tag() == "localhost/ortserve:0.1.0"  # the stable overlay's newTag
    reqs = build_inputs.requirements(ROOT / "pyproject.toml")
    assert any(r.startswith("onnxruntime") for r in reqs) and any(r.startswith("scikit-build-core") for r in reqs)


def _distribution(site: Path, name: str, size: int, requires: list[str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (site / name).mkdir()
    (site / name / "data.bin").write_bytes(b"x" * size)
    meta = [f"Name: {name}", *(f"Requires-Dist: {r}" for r in requires), "Requires-Dist: pytest ; extra == 'test'"]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "RECORD").write_text(f"{name}/data.bin,sha256=x,{size}\n{info.name}/RECORD,,\n")


def test_savings_count_only_what_nothing_else_needs(tmp_path: Path) -> None:
    site = tmp_path / "opt/venv/lib/python3.11/site-packages"
    _distribution(site, "ortserve", 10, ["tokenizers", "requests", "onnx"])
    _distribution(site, "tokenizers", 100, ["huggingface-hub"])
    _distribution(site, "huggingface_hub", 200, ["requests", "hf-xet"])
    _distribution(site, "hf_xet", 300, [])
    _distribution(site, "requests", 400, [])
    _distribution(site, "onnx", 500, ["numpy"])
    _distribution(site, "numpy", 600, [])
    report = SizeReport("x", 0, 0, 0, [], read_distributions(site))
    sizes = {d.name: d.size for d in report.distributions}  # names canonical; sizes: the files RECORD lists
    assert 300 < sizes["hf-xet"] < 400 and 200 < sizes["huggingface-hub"] < 300
    assert report.saving(["huggingface_hub"]) == sizes["huggingface-hub"] + sizes["hf-xet"]  # requests stays
    assert report.saving(["onnx"]) == sizes["onnx"] + sizes["numpy"]
    assert json.dumps(report.lines())  # printable
