"""A small Dockerfile parser and the checks deploy/Dockerfile must pass (no Docker daemon needed).

Parsing follows the Dockerfile reference: parser directives, `#` comments, backslash line
continuations, exec (JSON) and shell forms, ARG substitution in FROM. .dockerignore matching follows
Docker's rules: Go-style globs plus `**`, a pattern also matches everything below a matched
directory, `!` re-includes, and the last matching pattern wins.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KNOWN_INSTRUCTIONS = frozenset(
    {
        "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
        "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
    }
)  # fmt: skip
BUILD_TOOLS = re.compile(r"(?<![\w-])(g\+\+|gcc|cmake|ninja-build|build-essential)(?![\w-])")


class DockerfileError(Exception):
    """The file cannot be parsed as a Dockerfile."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array of CMD/ENTRYPOINT/RUN, or None for the shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DockerfileError(f"line {self.line}: {self.keyword} JSON form must be a list of strings")
        return value


@dataclass
class Stage:
    index: int
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass(frozen=True)
class Copy:
    """A COPY/ADD: its --from stage (if any), sources and destination."""

    from_stage: str | None
    sources: list[str]
    dest: str
    line: int


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the build stages, in order."""
    instructions = _instructions(text)
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for inst in instructions:
        if inst.keyword not in KNOWN_INSTRUCTIONS:
            raise DockerfileError(f"line {inst.line}: unknown instruction {inst.keyword}")
        if inst.keyword == "FROM":
            words = inst.args.split()
            words = [w for w in words if not w.startswith("--platform")]
            if len(words) == 3 and words[1].upper() == "AS":
                base, name = words[0], words[2]
            elif len(words) == 1:
                base, name = words[0], None
            else:
                raise DockerfileError(f"line {inst.line}: FROM expects `image [AS name]`, got {inst.args!r}")
            stages.append(Stage(len(stages), _substitute(base, global_args, inst.line), name))
        elif not stages:
            if inst.keyword != "ARG":
                raise DockerfileError(f"line {inst.line}: only ARG may come before the first FROM")
            key, _, default = inst.args.partition("=")
            global_args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(inst)
    if not stages:
        raise DockerfileError("no FROM instruction")
    return global_args, stages


def _instructions(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue  # comments (parser directives included) and blank lines
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(part.strip() for part in pending if part.strip())
        pending = []
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    if pending:
        raise DockerfileError(f"line {start}: continuation runs past the end of the file")
    return out


def _substitute(value: str, args: dict[str, str], line: int) -> str:
    def lookup(match: re.Match[str]) -> str:
        key = match.group(1) or match.group(2)
        if not args.get(key):
            raise DockerfileError(f"line {line}: ${key} has no default ARG value")
        return args[key]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lookup, value)


def parse_copy(inst: Instruction) -> Copy:
    words = inst.exec_form() or shlex.split(inst.args)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if len(paths) < 2:
        raise DockerfileError(f"line {inst.line}: {inst.keyword} needs a source and a destination")
    from_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
    return Copy(from_stage, paths[:-1], paths[-1], inst.line)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"  # zero or more directories
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out + "$")


def load_dockerignore(path: Path) -> list[tuple[bool, re.Pattern[str]]]:
    return parse_dockerignore(path.read_text() if path.is_file() else "")


def parse_dockerignore(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) per pattern, in file order."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        pattern = pattern.strip("/").removeprefix("./")
        rules.append((negate, _glob_regex(pattern)))
    return rules


def is_ignored(relpath: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether .dockerignore keeps `relpath` (a path relative to the context) out of the build."""
    parts = relpath.strip("/").split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for negate, regex in rules:
        if any(regex.match(candidate) for candidate in candidates):
            ignored = not negate
    return ignored


def files_under(root: Path, relpath: str) -> list[str]:
    target = root / relpath
    if target.is_file():
        return [relpath]
    return [str(p.relative_to(root)) for p in sorted(target.rglob("*")) if p.is_file()]


@dataclass(frozen=True)
class BuildFacts:
    """What the Dockerfile is checked against: the repository and its packaging metadata."""

    repo_root: Path
    console_scripts: frozenset[str]
    # Files the build backend reads from the source tree (readme, CMakeLists.txt).
    build_inputs: frozenset[str]
    package_dirs: frozenset[str]
    dockerignore: str


def dockerfile_problems(text: str, facts: BuildFacts) -> list[str]:
    """Everything wrong with a Dockerfile for this repository; [] when it is fine."""
    try:
        _, stages = parse(text)
    except (DockerfileError, json.JSONDecodeError) as exc:
        return [f"unparsable: {exc}"]
    problems: list[str] = []
    names = [s.name for s in stages]
    if len(stages) < 2:
        problems.append("expected a multi-stage build (builder + runtime)")
    if any(n is None for n in names[:-1]) or len(set(names)) != len(names):
        problems.append(f"every build stage needs a unique name, got {names}")
    rules = parse_dockerignore(facts.dockerignore)
    used: set[str] = set()
    for stage in stages:
        if stage.base in names[: stage.index]:
            used.add(stage.base)
        elif stage.base in names:
            problems.append(f"stage {stage.name}: FROM {stage.base} refers to a later stage")
        elif ":" not in stage.base.rpartition("/")[2] or stage.base.endswith(":latest"):
            problems.append(f"stage {stage.name}: base image {stage.base} needs a pinned tag")
        copied: list[str] = []
        for inst in stage.of("COPY") + stage.of("ADD"):
            copy = parse_copy(inst)
            if copy.from_stage is not None:
                if copy.from_stage not in names[: stage.index]:
                    problems.append(f"line {inst.line}: COPY --from={copy.from_stage} names no earlier stage")
                used.add(copy.from_stage)
                continue
            for source in copy.sources:
                problems += _source_problems(inst, source, facts.repo_root, rules)
                copied.append(source.rstrip("/"))
        for inst in stage.of("RUN"):
            for token in re.findall(r"(?<![\w/$.-])((?:\./)?scripts/[\w./-]+)", inst.args):
                path = token.removeprefix("./")
                if not (facts.repo_root / path).is_file():
                    problems.append(f"line {inst.line}: RUN names {path}, which is not in the repository")
                elif not any(path == c or path.startswith(c + "/") for c in copied):
                    problems.append(f"line {inst.line}: RUN uses {path} before any COPY brings it in")
        if stage is not stages[-1]:
            missing = [p for p in sorted(facts.build_inputs | facts.package_dirs) if p not in copied]
            if any(i.keyword == "RUN" and "pip install" in i.args for i in stage.instructions) and missing:
                problems.append(f"stage {stage.name}: pip install runs without {missing} copied in")
    for stage in stages[:-1]:
        if stage.name not in used:
            problems.append(f"stage {stage.name} is never used by a later stage")
    problems += _runtime_problems(stages[-1], facts)
    return problems


def _source_problems(
    inst: Instruction, source: str, root: Path, rules: list[tuple[bool, re.Pattern[str]]]
) -> list[str]:
    if source.startswith(("/", "..")) or "$" in source:
        return [f"line {inst.line}: COPY source {source!r} must be a plain path inside the context"]
    if not (root / source).exists():
        return [f"line {inst.line}: COPY source {source} does not exist in the repository"]
    hidden = [f for f in files_under(root, source.rstrip("/")) if is_ignored(f, rules)]
    kept = [f for f in files_under(root, source.rstrip("/")) if not is_ignored(f, rules)]
    if not kept:
        return [f"line {inst.line}: COPY source {source} is excluded by .dockerignore"]
    stray = [f for f in hidden if not re.search(r"(__pycache__|\.pyc$|\.so$)", f)]
    return [f"line {inst.line}: .dockerignore hides {stray[:3]} from COPY {source}"] if stray else []


def _runtime_problems(final: Stage, facts: BuildFacts) -> list[str]:
    problems = []
    where = f"final stage {final.name}"
    users = final.of("USER")
    if not users:
        problems.append(f"{where}: no USER, the server would run as root")
    else:
        user = users[-1].args.split(":")[0]
        if not user.isdigit() or int(user) == 0:
            problems.append(f"{where}: USER {users[-1].args} must be a numeric non-zero uid (runAsNonRoot checks it)")
    entry = final.of("ENTRYPOINT")
    form = entry[-1].exec_form() if entry else None
    if form is None or form[:1] != ["ortserve"]:
        problems.append(f'{where}: ENTRYPOINT must be the exec form ["ortserve", ...]')
    elif form[0] not in facts.console_scripts:
        problems.append(f"{where}: ENTRYPOINT {form[0]} is not a console script in pyproject.toml")
    cmd = final.of("CMD")
    if not cmd or cmd[-1].exec_form() is None:
        problems.append(f"{where}: CMD must use the exec form so SIGTERM reaches the server")
    for inst in final.of("RUN"):
        if BUILD_TOOLS.search(inst.args):
            problems.append(f"line {inst.line}: the runtime stage installs build tools ({inst.args[:60]}...)")
    env = " ".join(i.args for i in final.of("ENV"))
    if "/opt/venv/bin" not in env:
        problems.append(f"{where}: PATH must include the venv's bin so `ortserve` resolves")
    return problems


def exposed_ports(text: str) -> set[int]:
    _, stages = parse(text)
    return {int(p.split("/")[0]) for inst in stages[-1].of("EXPOSE") for p in inst.args.split()}


def runtime_uid(text: str) -> int:
    _, stages = parse(text)
    return int(stages[-1].of("USER")[-1].args.split(":")[0])


def runtime_cmd(text: str) -> list[str]:
    _, stages = parse(text)
    return stages[-1].of("CMD")[-1].exec_form() or []


def runtime_copies(text: str) -> list[Copy]:
    _, stages = parse(text)
    return [parse_copy(i) for i in stages[-1].of("COPY")]
