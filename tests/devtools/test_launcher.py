"""The tools' one launcher (scripts/dev, ortserve_devtools.launcher): every command it lists is there, a command
line that names none is refused with the list, and every `scripts/dev ...` command the docs name is one it runs."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ortserve_devtools.launcher import TOOLS, UsageError, resolve, usage

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]
COMMANDS = [(group, name) for group, commands in TOOLS.items() for name in commands]


@pytest.mark.parametrize(("group", "name"), COMMANDS, ids=lambda v: v or "-")
def test_every_command_has_its_code(group: str, name: str) -> None:
    tool = TOOLS[group][name]
    if tool.script:
        assert (ROOT / "scripts" / tool.script).is_file()
    else:
        assert importlib.util.find_spec(tool.module) is not None, tool.module
    assert f"{group} {name}".strip() in usage()


def test_command_lines_resolve_to_the_tool_and_its_own_arguments() -> None:
    assert resolve(["bench", "serve", "--sweep"]) == ("bench serve", TOOLS["bench"]["serve"], ["--sweep"])
    assert resolve(["soak", "--minutes", "1"]) == ("soak", TOOLS["soak"][""], ["--minutes", "1"])
    assert resolve(["image", "build"]) == ("image", TOOLS["image"][""], ["build"])  # image has its own subcommands
    for argv, message in [([], "name a command"), (["bnech"], "no command 'bnech'"),
                          (["bench"], "name one of serve, ab,"), (["gpu", "chek"], "got 'chek'")]:
        with pytest.raises(UsageError, match=message):
            resolve(argv)


def test_the_launcher_runs_on_a_bare_python_and_refuses_a_bad_line_with_status_2() -> None:
    """Standard library only up to the command's own import: the GPU host's python3 has nothing else."""
    listed = subprocess.run([sys.executable, "-I", str(ROOT / "scripts" / "dev"), "--help"],
                            capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and "bench serve" in listed.stdout and "gpu unpack" in listed.stdout
    refused = subprocess.run([sys.executable, "-I", str(ROOT / "scripts" / "dev"), "bench", "nope"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "scripts/dev bench: name one of" in refused.stderr


def doc_commands() -> list[tuple[str, str]]:
    """(doc, the words after `scripts/dev`) for every scripts/dev command in the docs, inline or in a block."""
    found = []
    for doc in DOCS:
        for words in re.findall(r"scripts/dev((?: [a-z][\w-]*)+)", doc.read_text()):
            found.append((doc.name, words.strip()))
    return found


def test_every_command_the_docs_name_is_one_the_launcher_runs() -> None:
    named = doc_commands()
    assert len(named) >= 40
    wrong = [(doc, words) for doc, words in named if not _runs(words.split())]
    assert wrong == []
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    assert [n for n in TOOLS["bench"] if f"`{n}`" not in benchmarks] == []  # the index names every benchmark


def _runs(words: list[str]) -> bool:
    """A command the launcher runs, or a group named alone in prose (`scripts/dev bench`: every benchmark)."""
    if len(words) == 1 and words[0] in TOOLS:
        return True
    try:
        resolve(words)
    except UsageError:
        return False
    return True
