"""scripts/gpu_unpack: turn a stage written by scripts/gpu_stage into an ONNX Runtime CUDA install and print exports.

Standard library only (Python 3.11+): it runs on the GPU host before anything else is installed there.

    eval "$(python3 scripts/gpu_unpack --stage .gpu/stage --dest .gpu/ort)"

It verifies every staged file's sha256, reassembles and decompresses the libraries into DEST/onnxruntime/capi,
checks each library's sha256, installs the staged wheels into DEST/site and prints `export` lines (stdout) for
ORTSERVE_ONNXRUNTIME_LIB, ORT_INCLUDE_DIR, PYTHONPATH and LD_LIBRARY_PATH. A second run on the same stage only
prints the exports. Any failure: exit 1 with one line on stderr naming the file and the reason.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import lzma
import os
import shlex
import shutil
import site
import subprocess
import sys
from collections.abc import Callable, Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

MANIFEST = "stage.json"
FORMAT = 1
CAPI = Path("onnxruntime") / "capi"
SITE_DIR = "site"
# Holds the sha256 of the stage.json that DEST was built from: a second run with the same stage does no work.
MARKER = ".stage-sha256"
# Load order for --check: the provider resolves Provider_GetHost from providers_shared, loaded RTLD_GLOBAL first.
ROLES = ("core", "shared", "cuda")

_READ_CHUNK = 1 << 20
_OUT_CHUNK = 16 << 20

Log = Callable[[str], None]


class UnpackError(Exception):
    """One line for the user: the file at fault and why."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")


def human_size(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _plain_name(value: object, manifest: Path) -> str:
    """A file name from stage.json, refused if it could escape the directory it is joined to."""
    if not isinstance(value, str) or not value or value != Path(value).name or value in (".", ".."):
        raise UnpackError(manifest, f"bad file name {value!r}")
    return value


def _relative(value: object, manifest: Path) -> Path:
    if not isinstance(value, str) or not value or Path(value).is_absolute() or ".." in Path(value).parts:
        raise UnpackError(manifest, f"bad path {value!r}")
    return Path(value)


def load_manifest(stage: Path) -> dict[str, Any]:
    path = stage / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UnpackError(path, "missing (is --stage a directory written by scripts/gpu_stage?)") from None
    except (OSError, ValueError) as error:
        raise UnpackError(path, f"unreadable: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise UnpackError(path, f"format {found!r}; this gpu_unpack reads format {FORMAT}")
    for key in ("files", "libraries", "wheels"):
        if key not in manifest:
            raise UnpackError(path, f"no {key!r} entry")
    roles = sorted(str(library.get("role")) for library in manifest["libraries"])
    if roles != sorted(ROLES):
        raise UnpackError(path, f"libraries have roles {roles}, expected {sorted(ROLES)}")
    return manifest


def verify_files(stage: Path, manifest: dict[str, Any]) -> int:
    """Check every staged file's size and sha256 against stage.json; returns how many there are."""
    manifest_path = stage / MANIFEST
    for rel, info in manifest["files"].items():
        path = stage / _relative(rel, manifest_path)
        if not path.is_file():
            raise UnpackError(path, "missing from the stage")
        size = path.stat().st_size
        if size != info["size"]:
            raise UnpackError(path, f"{size} bytes, stage.json says {info['size']} (incomplete transfer?)")
        if sha256_file(path) != info["sha256"]:
            raise UnpackError(path, "sha256 differs from stage.json (corrupted transfer?)")
    return len(manifest["files"])


def decompress_parts(parts: Sequence[Path], dest: Path, *, sha256: str, size: int) -> None:
    """Concatenate `parts`, xz-decompress them into `dest` and check the result; `dest` appears only if it matches."""
    tmp = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_READ_CHUNK):
                        if decompressor.eof:
                            raise UnpackError(part, "data after the end of the xz stream")
                        try:
                            data = decompressor.decompress(chunk, max_length=_OUT_CHUNK)
                            while True:
                                out.write(data)
                                digest.update(data)
                                written += len(data)
                                if decompressor.eof or decompressor.needs_input:
                                    break
                                data = decompressor.decompress(b"", max_length=_OUT_CHUNK)
                        except lzma.LZMAError as error:
                            raise UnpackError(part, f"not valid xz data: {error}") from None
                        if decompressor.eof and decompressor.unused_data:
                            raise UnpackError(part, "data after the end of the xz stream")
        if not decompressor.eof:
            raise UnpackError(parts[-1] if parts else dest, "the xz stream ends early (a part missing?)")
        if written != size or digest.hexdigest() != sha256:
            raise UnpackError(dest, f"reassembled library ({written} bytes) differs from stage.json ({size} bytes)")
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _symlink(link: Path, target: str) -> None:
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def library_paths(dest: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Role ("core", "shared", "cuda") -> the library's path under DEST/onnxruntime/capi."""
    manifest_path = Path(MANIFEST)
    return {lib["role"]: dest / CAPI / _plain_name(lib["name"], manifest_path) for lib in manifest["libraries"]}


def install_libraries(stage: Path, dest: Path, manifest: dict[str, Any], log: Log) -> None:
    capi = dest / CAPI
    capi.mkdir(parents=True, exist_ok=True)
    manifest_path = stage / MANIFEST
    for library in manifest["libraries"]:
        name = _plain_name(library["name"], manifest_path)
        parts = [stage / _relative(part, manifest_path) for part in library["parts"]]
        decompress_parts(parts, capi / name, sha256=library["sha256"], size=library["size"])
        log(f"{name}: {human_size(library['size'])}, sha256 ok")
    # The SONAME chain (libonnxruntime.so -> .so.1 -> .so.1.x.y), as a system install has it; the engine's loader
    # takes the first libonnxruntime.so* in sorted order, which then resolves to the real file.
    core = library_paths(dest, manifest)["core"].name
    prefix = "libonnxruntime.so."
    if core.startswith(prefix) and "." in core[len(prefix):]:
        soname = prefix + core[len(prefix):].split(".")[0]
        _symlink(capi / soname, core)
        _symlink(capi / "libonnxruntime.so", soname)
    elif core != "libonnxruntime.so":
        _symlink(capi / "libonnxruntime.so", core)


def install_wheels(wheels: Sequence[Path], site_dir: Path) -> None:
    """pip install the wheels (no index, no dependencies) into a fresh `site_dir`."""
    tmp = site_dir.with_name(site_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
               "--no-deps", "--no-compile", "--target", str(tmp), *map(str, wheels)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit status {result.returncode}"
        raise UnpackError(wheels[0].parent, f"pip install --target failed: {reason}")
    shutil.rmtree(site_dir, ignore_errors=True)
    tmp.rename(site_dir)


def nvidia_roots() -> list[Path]:
    """Directories of the `nvidia` namespace package (the CUDA pip wheels) visible to this Python."""
    candidates = [Path(path) / "nvidia" for path in site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        candidates.append(Path(site.getusersitepackages()) / "nvidia")
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(path) for path in spec.submodule_search_locations)
    roots: list[Path] = []
    seen: set[Path] = set()
    for candidate in candidates:
        if candidate.is_dir() and candidate.resolve() not in seen:
            seen.add(candidate.resolve())
            roots.append(candidate)
    return roots


def nvidia_lib_dirs(roots: Sequence[Path] | None = None) -> list[Path]:
    """Every `lib` directory under the nvidia roots that holds a shared library (cu13/lib, cudnn/lib, ...)."""
    found: list[Path] = []
    for root in nvidia_roots() if roots is None else roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            if Path(dirpath).name == "lib" and any(fnmatch(name, "*.so*") for name in filenames):
                found.append(Path(dirpath))
    return found


def export_lines(core_library: Path, include_dir: Path | None, site_dir: Path | None,
                 ld_dirs: Sequence[Path]) -> list[str]:
    """`export` lines for eval; prepended paths keep an existing value, without a stray ':' when it is empty."""
    lines = [f"export ORTSERVE_ONNXRUNTIME_LIB={shlex.quote(str(core_library))}"]
    if include_dir is not None:
        lines.append(f"export ORT_INCLUDE_DIR={shlex.quote(str(include_dir))}")
    if site_dir is not None:
        lines.append(f'export PYTHONPATH={shlex.quote(str(site_dir))}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    ld_path = ":".join(str(path) for path in ld_dirs)
    lines.append(f'export LD_LIBRARY_PATH={shlex.quote(ld_path)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"')
    return lines


_CHECK_CODE = """\
import ctypes, sys
for path in sys.argv[1:]:
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as error:
        reason = str(error).removeprefix(path + ": ").replace("\\n", " ")
        print(path + "\\t" + reason)
        sys.exit(1)
"""


def check_loads(libraries: Sequence[Path], ld_dirs: Sequence[Path]) -> tuple[str, str] | None:
    """dlopen the libraries in order in a child with LD_LIBRARY_PATH applied: (library, loader's error) or None."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([*map(str, ld_dirs), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    # The loader reads LD_LIBRARY_PATH at process start, hence a child process rather than this one.
    result = subprocess.run([sys.executable, "-c", _CHECK_CODE, *map(str, libraries)], env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    if result.returncode == 0:
        return None
    path, tab, reason = result.stdout.strip().partition("\t")
    if tab:
        return path, reason
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return sys.executable, lines[-1].strip() if lines else f"exit status {result.returncode}"


def _up_to_date(stage: Path, dest: Path, manifest: dict[str, Any]) -> bool:
    marker = dest / MARKER
    if not marker.is_file() or marker.read_text().strip() != sha256_file(stage / MANIFEST):
        return False
    paths = library_paths(dest, manifest)
    for library in manifest["libraries"]:
        path = paths[library["role"]]
        if not path.is_file() or path.stat().st_size != library["size"]:
            return False
    return not manifest["wheels"] or (dest / SITE_DIR).is_dir()


def unpack(stage: Path, dest: Path, log: Log) -> dict[str, Any]:
    """Build DEST from the stage unless it already matches it; returns the manifest."""
    manifest = load_manifest(stage)
    if _up_to_date(stage, dest, manifest):
        log(f"{dest} already matches {stage / MANIFEST}")
        return manifest
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MARKER).unlink(missing_ok=True)
    log(f"verified {verify_files(stage, manifest)} staged files")
    install_libraries(stage, dest, manifest, log)
    if manifest["wheels"]:
        wheels = [stage / _relative(wheel, stage / MANIFEST) for wheel in manifest["wheels"]]
        install_wheels(wheels, dest / SITE_DIR)
        log(f"installed {len(wheels)} wheels into {dest / SITE_DIR}")
    (dest / MARKER).write_text(sha256_file(stage / MANIFEST) + "\n")
    return manifest


def run(stage: Path, dest: Path, *, check: bool, log: Log) -> list[str]:
    stage = stage.resolve()
    dest = dest.resolve()
    manifest = unpack(stage, dest, log)
    ld_dirs = [dest / CAPI, *nvidia_lib_dirs()]
    log(f"{len(ld_dirs) - 1} nvidia lib dirs: {' '.join(str(path) for path in ld_dirs[1:]) or 'none'}")
    paths = library_paths(dest, manifest)
    if check:
        problem = check_loads([paths[role] for role in ROLES], ld_dirs)
        if problem is not None:
            raise UnpackError(problem[0], f"does not load with the printed LD_LIBRARY_PATH: {problem[1]}")
        log(f"check: {paths['cuda'].name} and its dependencies load")
    include = manifest.get("include")
    include_dir = stage / _relative(include, stage / MANIFEST) if include is not None else None
    site_dir = dest / SITE_DIR if manifest["wheels"] else None
    return export_lines(paths["core"], include_dir, site_dir, ld_dirs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu_unpack", description="Reassemble a gpu_stage bundle and print shell exports for it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--stage", type=Path, default=Path(".gpu/stage"), help="directory written by gpu_stage")
    parser.add_argument("--dest", type=Path, default=Path(".gpu/ort"), help="where the install goes")
    parser.add_argument("--check", action="store_true",
                        help="also dlopen the CUDA provider with the printed LD_LIBRARY_PATH (first missing library)")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"gpu_unpack: {message}", file=sys.stderr)

    try:
        lines = run(args.stage, args.dest, check=args.check, log=log)
    except UnpackError as error:
        log(str(error))
        return 1
    except OSError as error:
        log(f"{error.filename or '?'}: {error.strerror or error}")
        return 1
    except (KeyError, TypeError, subprocess.SubprocessError) as error:
        log(f"{args.stage / MANIFEST}: unexpected content or failed step ({type(error).__name__}: {error})")
        return 1
    print("\n".join(lines))
    return 0
