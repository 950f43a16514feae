"""The `registry` CLI end to end, as real subprocesses, against the file store and the Consul stand-in."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from ortserve_devtools.consul_standin import ConsulStandin
from support.tiny_bundle import build_tiny_bundle, build_tiny_embedding_bundle, tiny_model

from ortserve.registry.artifacts import ArtifactStore
from ortserve.registry.connect import open_store
from ortserve.registry.publishing import publish

Cli = Callable[..., subprocess.CompletedProcess[str]]


@dataclass
class Registry:
    """One registry under test: the CLI arguments that address it and a byte-level snapshot."""

    args: list[str]
    cwd: Path
    snapshot: Callable[[], object]
    url: str
    artifacts: Path
    standin: ConsulStandin | None = None


def _dir_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(params=["file", "standin"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    if request.param == "file":
        root = tmp_path / "store"
        yield Registry(args=["--registry", root.as_uri()], cwd=tmp_path, snapshot=lambda: _dir_snapshot(root),
                       url=root.as_uri(), artifacts=root / "artifacts")
    else:
        artifacts = tmp_path / "artifacts"
        with ConsulStandin() as s:
            def snapshot() -> object:
                with s.state.cond:
                    entries = {k: (e.Value, e.ModifyIndex) for k, e in s.state.entries.items()}
                    return s.state.index, entries, _dir_snapshot(artifacts) if artifacts.exists() else {}
            yield Registry(args=["--registry", s.url(), "--artifacts", artifacts.as_uri()], cwd=tmp_path,
                           snapshot=snapshot, url=s.url(), artifacts=artifacts, standin=s)


def ok(cli: Cli, reg: Registry, *args: str, env: dict[str, str] | None = None) -> str:
    result = cli(*reg.args, *args, cwd=reg.cwd, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def show(cli: Cli, reg: Registry, model: str) -> dict:
    return json.loads(ok(cli, reg, "show", model, "--json"))


def test_publish_show_list_route_rollback_retire(cli: Cli, registry: Registry, bundles: dict[str, Path]) -> None:
    out = ok(cli, registry, "publish", "--model", "sentiment", "--version", "v1", "--bundle", str(bundles["a"]),
             "--weight", "100")
    assert "published sentiment/v1" in out and "routing sentiment: v1=100" in out
    out = ok(cli, registry, "publish", "--model", "sentiment", "--version", "v2", "--bundle", str(bundles["b"]),
             "--weight", "5")
    assert "v1=95 v2=5" in out
    doc = show(cli, registry, "sentiment")
    assert doc["routing"]["weights"] == {"v1": 95, "v2": 5}
    assert doc["routing"]["history"] == [{"v1": 100}]
    v2 = doc["versions"]["v2"]
    assert v2["weight"] == 5 and v2["labels"] == ["negative", "positive"] and v2["max_seq_len"] == 32
    assert v2["format"] == "onnx-text-classifier" and "@" in v2["created_by"]
    assert len(v2["artifact"]["sha256"]) == 64 and v2["artifact"]["uri"].startswith("file:///")

    table = ok(cli, registry, "show", "sentiment")
    assert "VERSION" in table and "v1=95 v2=5" in table
    assert json.loads(ok(cli, registry, "list", "--json")) == [
        {"model": "sentiment", "routing": {"v1": 95, "v2": 5}, "versions": ["v1", "v2"]}]
    assert "sentiment" in ok(cli, registry, "list")

    assert "v1=20 v2=80" in ok(cli, registry, "route", "sentiment", "v1=20", "v2=80")
    assert "v1=95 v2=5" in ok(cli, registry, "rollback", "sentiment")
    assert show(cli, registry, "sentiment")["routing"]["history"] == [{"v1": 100}]
    ok(cli, registry, "route", "sentiment", "v1=100", "v2=0")
    assert "retired sentiment/v2" in ok(cli, registry, "retire", "sentiment", "v2")
    doc = show(cli, registry, "sentiment")
    assert set(doc["versions"]) == {"v1"} and doc["routing"]["weights"] == {"v1": 100}


def test_publish_and_show_an_embedding_bundle(cli: Cli, registry: Registry, broken_bundles: dict[str, Path]) -> None:
    out = ok(cli, registry, "publish", "--model", "search", "--version", "v1", "--bundle",
             str(broken_bundles["embedding"]), "--weight", "100")
    assert "search" in out
    record = show(cli, registry, "search")["versions"]["v1"]
    assert (record["format"], record["dim"], "labels" in record) == ("onnx-text-embedding", 3, False)
    table = ok(cli, registry, "show", "search")
    assert "(embedding, dim 3)" in table


def test_republish(cli: Cli, registry: Registry, bundles: dict[str, Path], tmp_path: Path) -> None:
    ok(cli, registry, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]))
    before = registry.snapshot()
    # A byte-identical copy elsewhere (other path, other mtimes) is the same artifact: a no-op.
    copy = tmp_path / "copy"
    shutil.copytree(bundles["a"], copy)
    out = ok(cli, registry, "publish", "--model", "m", "--version", "v1", "--bundle", str(copy))
    assert "already published" in out
    assert registry.snapshot() == before
    result = cli(*registry.args, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["b"]),
                 cwd=registry.cwd)
    assert result.returncode == 1 and "different bytes" in result.stderr
    assert registry.snapshot() == before


@pytest.fixture(scope="module")
def broken_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("broken")
    out = {}
    for name in ("missing", "not-onnx", "wrong-io", "bad-tokenizer"):
        out[name] = build_tiny_bundle(root / name)
    (out["missing"] / "tokenizer.json").unlink()
    (out["not-onnx"] / "model.onnx").write_bytes(b"this is not a protobuf \xff\x00" * 20)
    onnx.save(tiny_model(output_name="scores"), str(out["wrong-io"] / "model.onnx"))
    (out["bad-tokenizer"] / "tokenizer.json").write_text('{"version": "1.0", "model": 42}')
    # Bundles whose graph is the other kind than their manifest declares.
    out["embedding-manifest-classifier-graph"] = build_tiny_embedding_bundle(
        root / "embedding-manifest-classifier-graph", dim=2, graph_output="logits")
    out["classifier-manifest-embedding-graph"] = build_tiny_bundle(root / "classifier-manifest-embedding-graph")
    onnx.save(tiny_model(output_name="embedding"), str(out["classifier-manifest-embedding-graph"] / "model.onnx"))
    out["embedding"] = build_tiny_embedding_bundle(root / "embedding", dim=3)
    return out


# (arguments, exit code, stderr pattern). "{b:NAME}" is a broken bundle, "{good}" a valid one.
BAD_INPUTS = [
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:missing}"], 1, "tokenizer.json: missing"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:not-onnx}"], 1, "not an ONNX model"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:wrong-io}"], 1, "missing output 'logits'"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:bad-tokenizer}"], 1, "not a loadable"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:embedding-manifest-classifier-graph}"], 1,
     "missing output 'embedding'.*declares format 'onnx-text-embedding'.*the graph is a classifier"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:classifier-manifest-embedding-graph}"], 1,
     "missing output 'logits'.*declares format 'onnx-text-classifier'.*the graph is an embedding"),
    # Embedding bundles are optimised too (judged by cosine); this one is no BERT, so there is nothing to quantize.
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{b:embedding}", "--optimize", "int8"], 1,
     "not a BERT-family encoder"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "/nonexistent"], 1, "not a directory"),
    (["publish", "--model", "m", "--version", "a/b", "--bundle", "{good}"], 2, "invalid version name"),
    (["publish", "--model", "m", "--version", "..", "--bundle", "{good}"], 2, "invalid version name"),
    (["publish", "--model", "m", "--version", "v 2", "--bundle", "{good}"], 2, "invalid version name"),
    (["publish", "--model", "../m", "--version", "v9", "--bundle", "{good}"], 2, "invalid model name"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{good}", "--weight", "101"], 2, "0..100"),
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{good}", "--optimize", "int4"], 2, "invalid choice"),
    # The registry tests' tiny bundle is no BERT: nothing to fuse, and nothing written anywhere.
    (["publish", "--model", "m", "--version", "v9", "--bundle", "{good}", "--optimize", "fuse"], 1,
     "not a BERT-family encoder"),
    (["publish", "--model", "m", "--version", "v1", "--bundle", "{good-b}"], 1, "different bytes"),
    (["route", "m", "v1=50", "v2=40"], 1, "sum to 100, got 90"),
    (["route", "m", "v1=50", "v3=50"], 1, "unpublished version.*v3"),
    (["route", "m", "v1=-5", "v2=105"], 2, "must be >= 0"),
    (["route", "m", "v1:100"], 2, "VERSION=PERCENT"),
    (["route", "m", "v1=abc"], 2, "not an integer"),
    (["route", "m", "../v1=100"], 2, "invalid version name"),
    (["route", "nope", "v1=100"], 1, "unknown model 'nope'"),
    (["show", "nope"], 1, "unknown model 'nope'"),
    (["rollback", "nope"], 1, "unknown model 'nope'"),
    (["rollback", "m"], 1, "no earlier routing"),
    (["retire", "m", "v1"], 1, "still has 100% of traffic"),
    (["retire", "m", "v7"], 1, "not published"),
    (["retire", "m", "v 1"], 2, "invalid version name"),
    (["frobnicate"], 2, "invalid choice"),
    (["route", "m"], 2, "required"),
    (["--registry", "gopher://x", "list"], 2, "unsupported scheme"),
    (["--registry", "consul://h:port", "list"], 2, "bad port"),
]


@pytest.fixture
def seeded(registry: Registry, bundles: dict[str, Path]) -> Registry:
    """m/v1 (100%) and m/v2 (0%), written through the Python API (the CLI's own path is tested above)."""
    store, artifacts = open_store(registry.url), ArtifactStore(registry.artifacts)
    publish(store, artifacts, model="m", version="v1", bundle_dir=bundles["a"], weight=100)
    publish(store, artifacts, model="m", version="v2", bundle_dir=bundles["b"])
    store.close()
    return registry


# Bundle checks and usage errors happen before the store is read: the file store alone covers them.
PRE_STORE = [case for case in BAD_INPUTS if case[1] == 2 or ("--bundle" in case[0] and case[0][-1] != "{good-b}")]
REFUSALS = [case for case in BAD_INPUTS if case not in PRE_STORE]


@pytest.mark.parametrize("args,code,pattern", REFUSALS, ids=[" ".join(a)[:50] for a, _, _ in REFUSALS])
def test_refusals_one_line_and_store_unchanged(
        cli: Cli, seeded: Registry, bundles: dict[str, Path], broken_bundles: dict[str, Path],
        args: list[str], code: int, pattern: str) -> None:
    _check_bad_input(cli, seeded, bundles, broken_bundles, args, code, pattern)


@pytest.mark.parametrize("args,code,pattern", PRE_STORE, ids=[" ".join(a)[:50] for a, _, _ in PRE_STORE])
def test_bundle_and_usage_errors_one_line_and_store_unchanged(
        cli: Cli, tmp_path: Path, bundles: dict[str, Path], broken_bundles: dict[str, Path],
        args: list[str], code: int, pattern: str) -> None:
    root = tmp_path / "store"
    publish(open_store(root.as_uri()), ArtifactStore(root / "artifacts"), model="m", version="v1",
            bundle_dir=bundles["a"], weight=100)
    reg = Registry(args=["--registry", root.as_uri()], cwd=tmp_path, snapshot=lambda: _dir_snapshot(root),
                   url=root.as_uri(), artifacts=root / "artifacts")
    _check_bad_input(cli, reg, bundles, broken_bundles, args, code, pattern)


def _check_bad_input(cli: Cli, seeded: Registry, bundles: dict[str, Path], broken_bundles: dict[str, Path],
                     args: list[str], code: int, pattern: str) -> None:
    subst = {"{good}": str(bundles["a"]), "{good-b}": str(bundles["b"]),
             **{f"{{b:{k}}}": str(v) for k, v in broken_bundles.items()}}
    args = [subst.get(a, a) for a in args]
    before = seeded.snapshot()
    # A later --registry wins in argparse, so the bad-URL cases override the fixture's.
    result = cli(*seeded.args, *args, cwd=seeded.cwd)
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("registry: error: "), result.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.stderr
    assert seeded.snapshot() == before


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_consul_down_exits_3(cli: Cli, tmp_path: Path, bundles: dict[str, Path]) -> None:
    url = f"consul://127.0.0.1:{_dead_port()}?timeout=2"
    for args in (["list"], ["show", "m"], ["route", "m", "v1=100"],
                 ["--artifacts", (tmp_path / "a").as_uri(), "publish", "--model", "m", "--version", "v1",
                  "--bundle", str(bundles["a"])]):
        result = cli("--registry", url, *args, cwd=tmp_path)
        assert result.returncode == 3, result.stderr
        assert result.stderr.count("\n") == 1 and "registry unreachable" in result.stderr
    assert not (tmp_path / "a").exists()  # publish checked the registry before uploading anything


def test_consul_without_leader_exits_3_and_acl_denied_exits_1(cli: Cli, tmp_path: Path) -> None:
    with ConsulStandin(token="t") as s:
        result = cli("--registry", s.url(), "list", cwd=tmp_path)
        assert result.returncode == 1 and "permission denied" in result.stderr
        assert cli("--registry", s.url(), "list", cwd=tmp_path, env={"CONSUL_HTTP_TOKEN": "t"}).returncode == 0
        s.no_leader = True
        result = cli("--registry", s.url(token="t"), "list", cwd=tmp_path)
        assert result.returncode == 3 and "No cluster leader" in result.stderr


def test_consul_publish_needs_an_artifact_root(cli: Cli, standin: ConsulStandin, tmp_path: Path,
                                               bundles: dict[str, Path]) -> None:
    result = cli("--registry", standin.url(), "publish", "--model", "m", "--version", "v1", "--bundle",
                 str(bundles["a"]), cwd=tmp_path)
    assert result.returncode == 2 and "--artifacts" in result.stderr
    result = cli("--registry", standin.url(), "publish", "--model", "m", "--version", "v1", "--bundle",
                 str(bundles["a"]), cwd=tmp_path, env={"ORTSERVE_ARTIFACTS": (tmp_path / "art").as_uri()})
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "art" / "sha256").glob("*.tar"))) == 1


def test_default_registry_is_model_store_in_cwd_and_env_overrides(cli: Cli, tmp_path: Path,
                                                                  bundles: dict[str, Path]) -> None:
    result = cli("publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model-store" / "kv" / "models" / "m" / "versions" / "v1.json").is_file()
    assert len(list((tmp_path / "model-store" / "artifacts" / "sha256").glob("*.tar"))) == 1
    other = tmp_path / "other"
    result = cli("list", "--json", cwd=tmp_path, env={"ORTSERVE_REGISTRY": other.as_uri()})
    assert result.returncode == 0 and json.loads(result.stdout) == []


def test_the_store_flags_are_taken_after_the_command_too(cli: Cli, tmp_path: Path,
                                                         bundles: dict[str, Path]) -> None:
    """Issue 45's friction: `registry publish --registry file:///...` exited 2 ("unrecognized arguments"). Both store
    flags are taken before or after the command; after it, the command's wins; neither, $ORTSERVE_REGISTRY."""
    named, art, other = tmp_path / "named", tmp_path / "art", tmp_path / "other"
    result = cli("publish", "--registry", named.as_uri(), "--artifacts", art.as_uri(), "--model", "m", "--version",
                 "v1", "--bundle", str(bundles["a"]), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (named / "kv" / "models" / "m" / "versions" / "v1.json").is_file()
    assert len(list((art / "sha256").glob("*.tar"))) == 1
    assert not (tmp_path / "model-store").exists()
    result = cli("--registry", other.as_uri(), "list", "--registry", named.as_uri(), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [m["model"] for m in json.loads(result.stdout)] == ["m"]
    result = cli("show", "m", "--json", cwd=tmp_path, env={"ORTSERVE_REGISTRY": named.as_uri()})
    assert result.returncode == 0, result.stderr


def test_cas_conflict_is_retried_without_losing_the_other_write(cli: Cli, registry: Registry,
                                                                bundles: dict[str, Path]) -> None:
    """A publishes and pauses after reading routing; B changes routing; A's write must fail its
    check, re-read and apply on top of B's weights instead of overwriting them. A is held (SIGSTOP as soon as it
    says it paused, SIGCONT once B is done), so B's write lands in A's pause however long B's CLI takes to start on
    a loaded machine (the 3 s pause only has to outlast this test reading A's line)."""
    ok(cli, registry, "publish", "--model", "m", "--version", "v1", "--bundle", str(bundles["a"]), "--weight", "100")
    ok(cli, registry, "publish", "--model", "m", "--version", "v2", "--bundle", str(bundles["b"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSERVE_", "CONSUL_HTTP"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), ORTSERVE_TEST_PAUSE_AT="publish-before-txn:3")
    copy = registry.cwd / "bundle-c"
    build_tiny_bundle(copy, seed=7)
    a = subprocess.Popen([sys.executable, "-m", "ortserve.registry.cli", *registry.args, "publish", "--model", "m",
                          "--version", "v3", "--bundle", str(copy), "--weight", "10"],
                         cwd=registry.cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert a.stderr is not None
    deadline = time.monotonic() + 60
    line = ""
    while "paused at publish-before-txn" not in line and time.monotonic() < deadline:
        line = a.stderr.readline()
    assert "paused at" in line
    os.kill(a.pid, signal.SIGSTOP)
    try:
        ok(cli, registry, "route", "m", "v1=50", "v2=50")  # B, while A holds a stale read
    finally:
        os.kill(a.pid, signal.SIGCONT)
    _out, err = a.communicate(timeout=60)
    assert a.returncode == 0, err
    doc = show(cli, registry, "m")
    # A's blend applied to B's 50/50, not to the 100/0 it first read.
    assert doc["routing"]["weights"] == {"v1": 45, "v2": 45, "v3": 10}
    assert doc["routing"]["history"][0] == {"v1": 50, "v2": 50}
