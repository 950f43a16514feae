"""The commands and paths that the deploy docs and the publish Job name are real.

`registry ...` lines are parsed with the registry CLI's own parser (no store is opened), so a
renamed flag or subcommand breaks this test rather than an operator's rollout.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from manifest_files import DEPLOY_ROOT, K8S_ROOT, REPO_ROOT, load_docs

from ortserve.registry.cli import UsageError, build_parser

DOCS = [REPO_ROOT / "docs" / "canary.md", DEPLOY_ROOT / "consul" / "README.md", DEPLOY_ROOT / "README.md"]


def registry_commands(text: str) -> list[str]:
    """Full `registry SUBCOMMAND ARGS` commands, inline and in code blocks (not bare subcommand names)."""
    inline = [c for c in re.findall(r"`(registry [^`]+)`", text) if len(c.split()) >= 3]
    blocks = [line.strip() for line in text.splitlines() if line.strip().startswith("registry ")]
    return inline + blocks


def parses(argv: list[str]) -> str | None:
    """None when the registry CLI accepts argv, else its message."""
    try:
        build_parser().parse_args(argv)
    except UsageError as exc:
        return str(exc)
    except SystemExit as exc:  # argparse's own exit for -h/--version
        return f"exit {exc.code}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_paths_named_in_docs_exist(doc: Path) -> None:
    paths = set(re.findall(r"\b((?:deploy|docs|scripts|tests)/[\w./-]*[\w/])", doc.read_text()))
    assert paths, f"{doc} names no repository paths"
    assert sorted(p for p in paths if not (REPO_ROOT / p).exists()) == []


def test_registry_commands_in_the_canary_doc_parse() -> None:
    commands = registry_commands((REPO_ROOT / "docs" / "canary.md").read_text())
    assert len(commands) >= 5
    problems = {c: parses(shlex.split(c)[1:]) for c in commands}
    assert {c: p for c, p in problems.items() if p} == {}


def test_publish_job_arguments_parse() -> None:
    docs = load_docs(K8S_ROOT / "job-publish.yaml")
    (job,) = (d for d in docs if d["kind"] == "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    configmap = next(d for d in load_docs(K8S_ROOT / "base" / "registry-configmap.yaml"))["data"]
    # The kubelet expands $(VAR) from the container's env; these come from the registry ConfigMap.
    args = [re.sub(r"\$\((\w+)\)", lambda m: configmap[m.group(1)], a) for a in container["args"]]
    assert container["command"] == ["registry"]
    assert parses(args) is None
    parsed = build_parser().parse_args(args)
    assert parsed.command == "publish" and parsed.bundle.startswith("/bundles/")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/bundles" in mounts and "/artifacts" in mounts


def test_parser_check_can_fail() -> None:
    assert parses(["rout", "sentiment", "v1=80"]) is not None
    assert parses(["publish", "--model", "m", "--version", "v2", "--bundle", "b", "--weight", "150"]) is not None
    assert parses(["publish", "--model", "m", "--version", "v2"]) is not None  # no --bundle


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a Markdown text (a fence that lost its line breaks is no block)."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_readmes_python_examples_parse_and_it_stays_short() -> None:
    """Each Python example a user copies from the README is a block that parses (a reflow once ran one into prose),
    and the README is at most 300 lines (what a user reads; the rest lives in docs/)."""
    import ast

    text = (REPO_ROOT / "README.md").read_text()
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python") >= 5
    for block in blocks:
        ast.parse(block)
    assert len(text.splitlines()) <= 300


def test_python_blocks_can_fail() -> None:
    prose = "With the tagger: ```python text = triton.InferInput(...) print(reply) ```\n"
    assert python_blocks(prose) == [] and prose.count("```python") == 1
