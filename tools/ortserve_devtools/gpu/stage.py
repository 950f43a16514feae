"""scripts/gpu_stage: stage here what a bare CUDA host (no network) needs to build and run ortserve on its GPU.

    scripts/gpu_stage [--out .gpu/stage] [--arch 90] [--part-mib 60] [--ort-version 1.31.1] [--wheel PATH]

The stage holds the three ONNX Runtime libraries from the onnxruntime-gpu wheel (the CUDA provider with every
cubin/PTX but the target arch zeroed, see `prune_fatbins`), xz-compressed and split into parts no larger than
--part-mib; the small wheels the host lacks; the ORT C headers; and stage.json with every file's sha256.
scripts/gpu_unpack reassembles it on the host. Exit status 1, with one line on stderr, on any failure, including a
stage larger than --max-mib (one transfer to the host carries at most 64 MiB, repository included).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import math
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ortserve_devtools.checkout import ROOT
from ortserve_devtools.gpu.unpack import FORMAT, MANIFEST, ROLES, human_size, sha256_file

CACHE = Path(os.environ.get("ORTSERVE_CACHE") or Path.home() / ".cache" / "ortserve") / "gpu"

Log = Callable[[str], None]
Buffer = bytes | bytearray | mmap.mmap

# ---------------------------------------------------------------------------------------------------------------
# Fatbin pruning. A fatbin wrapper: magic u32, version u16 (1), header size u16 (16), payload size u64; its payload
# is a run of entries: kind u16 (1 PTX, 2 ELF cubin), u16, header size u32, payload size u64 (padded), compressed
# size u32, u32, minor u16, major u16, arch u32, ..., flags u64 at offset 40. The next entry starts right after the
# payload.

FATBIN_MAGIC = 0xBA55ED50
_MAGIC = struct.pack("<I", FATBIN_MAGIC)
_WRAPPER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHI")
_FLAGS = struct.Struct("<Q")
_FLAGS_OFFSET = 40
KIND_PTX = 1
KIND_ELF = 2
FLAG_COMPRESSED = 0x2000


class StageError(Exception):
    """A failure reported as one line."""


class FatbinError(StageError):
    pass


@dataclass(frozen=True)
class FatbinEntry:
    offset: int
    kind: int
    arch: int
    header_size: int
    size: int
    compressed_size: int
    flags: int

    @property
    def payload_start(self) -> int:
        return self.offset + self.header_size

    @property
    def end(self) -> int:
        return self.payload_start + self.size

    @property
    def compressed(self) -> bool:
        return bool(self.flags & FLAG_COMPRESSED)

    @property
    def label(self) -> str:
        return f"{'ptx' if self.kind == KIND_PTX else 'elf'} sm_{self.arch}"


@dataclass(frozen=True)
class FatbinWrapper:
    offset: int
    end: int
    entries: tuple[FatbinEntry, ...]

    def has_elf(self, arch: int) -> bool:
        return any(entry.kind == KIND_ELF and entry.arch == arch for entry in self.entries)


def fatbin_region(data: Buffer) -> tuple[int, int]:
    """[start, end) of the .nv_fatbin section of a 64-bit little-endian ELF file; all of `data` if it is not ELF."""
    if data[:4] != b"\x7fELF":
        return 0, len(data)
    if data[4] != 2 or data[5] != 1:
        raise FatbinError("only 64-bit little-endian ELF files are supported")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    header = struct.Struct("<IIQQQQ")  # name, type, flags, addr, offset, size
    strtab = header.unpack_from(data, shoff + shstrndx * shentsize)[4]
    for index in range(shnum):
        name_offset, _, _, _, offset, size = header.unpack_from(data, shoff + index * shentsize)
        start = strtab + name_offset
        if data[start:data.find(b"\0", start)] == b".nv_fatbin":
            return offset, offset + size
    return 0, 0


def _parse_wrapper(data: Buffer, offset: int, limit: int) -> FatbinWrapper:
    _, _, header_size, payload_size = _WRAPPER.unpack_from(data, offset)
    end = offset + header_size + payload_size
    if end > limit:
        raise FatbinError(f"fatbin wrapper at {offset:#x}: its payload runs past the end of the fatbin data")
    entries: list[FatbinEntry] = []
    position = offset + header_size
    while position < end:
        if position + _FLAGS_OFFSET + _FLAGS.size > end:
            raise FatbinError(f"fatbin wrapper at {offset:#x}: truncated entry header at {position:#x}")
        kind, _, entry_header, size, compressed_size, _, _, _, arch = _ENTRY.unpack_from(data, position)
        (flags,) = _FLAGS.unpack_from(data, position + _FLAGS_OFFSET)
        entry = FatbinEntry(position, kind, arch, entry_header, size, compressed_size, flags)
        if kind not in (KIND_PTX, KIND_ELF) or entry_header < _FLAGS_OFFSET + _FLAGS.size or entry.end > end:
            raise FatbinError(f"fatbin wrapper at {offset:#x}: entry at {position:#x} (kind {kind}, header "
                              f"{entry_header}, size {size}) does not fit the layout this tool knows")
        # Only a compressed entry's framing is read (it is zeroed or kept whole); one whose compressed size does not
        # fit its payload would need its format understood, so it is refused.
        if entry.compressed and not 0 < compressed_size <= size:
            raise FatbinError(f"fatbin wrapper at {offset:#x}: compressed entry at {position:#x} ({entry.label}) has "
                              f"compressed size {compressed_size} for a {size}-byte payload; layout not understood")
        entries.append(entry)
        position = entry.end
    return FatbinWrapper(offset, end, tuple(entries))


def scan_fatbins(data: Buffer) -> list[FatbinWrapper]:
    """Every fatbin wrapper in `data` (its .nv_fatbin section when it is an ELF file), in file order."""
    start, limit = fatbin_region(data)
    wrappers: list[FatbinWrapper] = []
    position = start
    while (found := data.find(_MAGIC, position, limit)) >= 0:
        if found + _WRAPPER.size > limit:
            break
        _, version, header_size, _ = _WRAPPER.unpack_from(data, found)
        if version != 1 or header_size != _WRAPPER.size:
            position = found + len(_MAGIC)  # the magic's bytes by chance, not a wrapper header
            continue
        wrapper = _parse_wrapper(data, found, limit)
        wrappers.append(wrapper)
        position = wrapper.end
    return wrappers


@dataclass
class PruneReport:
    arch: int
    wrappers: int = 0
    pruned_wrappers: int = 0
    zeroed_entries: int = 0
    zeroed_bytes: int = 0
    zeroed_compressed: int = 0
    kept_entries: int = 0
    # Wrappers without an ELF for the arch, left whole: (offset, their entries' labels).
    lacking: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    # Byte ranges [start, end) to zero: the payloads of the pruned entries.
    ranges: list[tuple[int, int]] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "arch": self.arch, "wrappers": self.wrappers, "pruned_wrappers": self.pruned_wrappers,
            "zeroed_entries": self.zeroed_entries, "zeroed_bytes": self.zeroed_bytes,
            "zeroed_compressed_entries": self.zeroed_compressed, "kept_entries": self.kept_entries,
            "wrappers_without_arch": [{"offset": offset, "entries": list(labels)} for offset, labels in self.lacking],
        }


def plan_prune(data: Buffer, arch: int) -> PruneReport:
    """What `prune_fatbins` zeroes: in every wrapper with an sm_`arch` ELF, every entry of another arch.

    The driver loads the sm_`arch` cubin on such a GPU, so the others are never read; wrappers without one stay
    whole (their PTX or other cubins may be what the driver needs). Raises FatbinError if no wrapper has the arch.
    """
    report = PruneReport(arch)
    for wrapper in scan_fatbins(data):
        report.wrappers += 1
        if not wrapper.has_elf(arch):
            report.lacking.append((wrapper.offset, tuple(entry.label for entry in wrapper.entries)))
            report.kept_entries += len(wrapper.entries)
            continue
        report.pruned_wrappers += 1
        for entry in wrapper.entries:
            if entry.arch == arch:
                report.kept_entries += 1
                continue
            report.ranges.append((entry.payload_start, entry.end))
            report.zeroed_entries += 1
            report.zeroed_bytes += entry.size
            report.zeroed_compressed += entry.compressed
    if report.pruned_wrappers == 0:
        raise FatbinError(f"no fatbin wrapper has an sm_{arch} cubin ({report.wrappers} wrappers found); "
                          "pick another --arch")
    return report


def prune_fatbins(data: Buffer, arch: int) -> tuple[bytearray, PruneReport]:
    """A copy of `data` with the payload of every entry `plan_prune` picks zeroed (headers and sizes unchanged)."""
    report = plan_prune(data, arch)
    pruned = bytearray(data)
    view = memoryview(pruned)
    for start, end in report.ranges:
        view[start:end] = bytes(end - start)
    view.release()
    return pruned, report


# ---------------------------------------------------------------------------------------------------------------
# Compression and parts.

XZ_PRESET = 9 | lzma.PRESET_EXTREME
# xz -9's dictionary: blocks below it only lose ratio, so small files stay one block (one thread).
_XZ_MIN_BLOCK = 64 << 20


def compress_xz(data: bytes | bytearray, dest: Path, *, preset: int = XZ_PRESET, threads: int = 2) -> str:
    """Write `data` xz-compressed to `dest`; returns how (the xz CLI when present and threads > 1, else lzma)."""
    xz = shutil.which("xz")
    if xz and threads > 1 and (os.cpu_count() or 1) > 1:
        level = f"-{preset & ~lzma.PRESET_EXTREME}{'e' if preset & lzma.PRESET_EXTREME else ''}"
        block = max(math.ceil(len(data) / threads), _XZ_MIN_BLOCK)
        command = [xz, level, f"-T{threads}", f"--block-size={block}", "--check=crc64", "-c", "-q"]
        with dest.open("wb") as out:
            result = subprocess.run(command, input=data, stdout=out, stderr=subprocess.PIPE, check=False)
        if result.returncode != 0:
            raise StageError(f"{dest}: {' '.join(command)} failed: {result.stderr.decode(errors='replace').strip()}")
        return f"xz {level} -T{threads}"
    dest.write_bytes(lzma.compress(data, format=lzma.FORMAT_XZ, preset=preset))
    return f"lzma preset {preset & ~lzma.PRESET_EXTREME}{'e' if preset & lzma.PRESET_EXTREME else ''}"


def split_file(path: Path, part_bytes: int) -> list[Path]:
    """Cut `path` into path.000, path.001, ... of at most `part_bytes` each if it is larger; else leave it whole."""
    size = path.stat().st_size
    if size <= part_bytes:
        return [path]
    parts: list[Path] = []
    with path.open("rb") as source:
        for index in range(math.ceil(size / part_bytes)):
            part = path.with_name(f"{path.name}.{index:03d}")
            with part.open("wb") as out:
                remaining = part_bytes
                while remaining and (chunk := source.read(min(remaining, 1 << 20))):
                    out.write(chunk)
                    remaining -= len(chunk)
            parts.append(part)
    path.unlink()
    return parts


# ---------------------------------------------------------------------------------------------------------------
# Wheels.

PYTHON_TAGS = ("--python-version", "3.12", "--implementation", "cp")
ORT_PLATFORM = "manylinux_2_28_x86_64"
# This pip does not widen a --platform to older manylinux tags: list those a glibc >= 2.28 host runs.
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

EXTRA_WHEELS: dict[str, str] = {
    # The releases the dev venv has, where the test suite exercises them.
    "structlog": "26.1.0",
    "orjson": "3.13.0",
    "py-consul": "1.8.0",
    # 1.62.3: newest whose generated code has no GRPC_GENERATED_VERSION/protobuf runtime check (1.63 adds both).
    "grpcio-health-checking": "1.62.3",
    "grpcio-reflection": "1.62.3",
}
# Generated-code lines that refuse an older grpcio/protobuf at import time; no staged wheel may carry them.
VERSION_CHECK_MARKERS = (b"GRPC_GENERATED_VERSION", b"ValidateProtobufRuntimeVersion")


def ort_wheel_name(version: str) -> str:
    return f"onnxruntime_gpu-{version}-cp312-cp312-{ORT_PLATFORM}.whl"


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def cached_wheel(directory: Path, name: str, version: str) -> Path | None:
    matches = sorted(directory.glob(f"{_normalized(name)}-{version}-*.whl"))
    return matches[0] if matches else None


def pip_download(spec: str, dest: Path, platforms: Sequence[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", *PYTHON_TAGS, *(f"--platform={platform}" for platform in platforms),
               "-d", str(dest), spec]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or [f"exit {result.returncode}"]
        raise StageError(f"pip download {spec} failed: {errors[-1].strip()}")


def fetch_wheel(cache: Path, name: str, version: str, platforms: Sequence[str], log: Log) -> Path:
    """The wheel from `cache`, downloaded into it first when absent."""
    found = cached_wheel(cache, name, version)
    if found is None:
        log(f"downloading {name}=={version}")
        pip_download(f"{name}=={version}", cache, platforms)
        found = cached_wheel(cache, name, version)
        if found is None:
            raise StageError(f"pip download {name}=={version} left no matching wheel in {cache}")
    return found


def version_checks(wheel: Path) -> list[str]:
    """The wheel's modules whose generated code checks the grpcio/protobuf version at import."""
    hits: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.filename.endswith(".py"):
                text = archive.read(info)
                hits.extend(f"{info.filename} ({marker.decode()})"
                            for marker in VERSION_CHECK_MARKERS if marker in text)
    return hits


# ---------------------------------------------------------------------------------------------------------------
# The stage.


@dataclass
class Library:
    role: str  # one of unpack.ROLES
    name: str
    data: bytes | bytearray
    original_sha256: str
    original_size: int
    prune: PruneReport | None = None


def library_names(ort_version: str) -> dict[str, str]:
    return {"core": f"libonnxruntime.so.{ort_version}", "shared": "libonnxruntime_providers_shared.so",
            "cuda": "libonnxruntime_providers_cuda.so"}


def wheel_libraries(wheel: Path, ort_version: str, arch: int, log: Log) -> list[Library]:
    """The three libraries from an onnxruntime-gpu wheel, the CUDA provider pruned to sm_`arch`."""
    libraries: list[Library] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            for role, name in library_names(ort_version).items():
                member = f"onnxruntime/capi/{name}"
                try:
                    data: bytes | bytearray = archive.read(member)
                except KeyError:
                    raise StageError(f"{wheel}: no {member} (not an onnxruntime-gpu {ort_version} wheel?)") from None
                library = Library(role, name, data, hashlib.sha256(data).hexdigest(), len(data))
                if role == "cuda":
                    library.data, library.prune = prune_fatbins(data, arch)
                    report = library.prune
                    log(f"{name}: zeroed {report.zeroed_entries} entries ({report.zeroed_bytes / 2**20:.1f} MiB) in "
                        f"{report.pruned_wrappers} of {report.wrappers} fatbin wrappers; {len(report.lacking)} "
                        f"wrappers lack sm_{arch} and stay whole ({_lacking_archs(report)})")
                libraries.append(library)
    except (zipfile.BadZipFile, OSError) as error:
        raise StageError(f"{wheel}: {error}") from None
    return libraries


def _lacking_archs(report: PruneReport) -> str:
    labels = sorted({label for _, entries in report.lacking for label in entries})
    return ", ".join(labels) or "none"


def ort_include_dir() -> Path:
    """The ORT C headers' directory, from scripts/fetch_ort_headers.sh (cached after its first run)."""
    script = ROOT / "scripts" / "fetch_ort_headers.sh"
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        reason = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise StageError(f"{script}: {reason}")
    return Path(lines[-1])


def write_stage(out: Path, *, libraries: Sequence[Library], wheels: Sequence[Path], include_dir: Path | None,
                meta: dict[str, Any], part_bytes: int, preset: int = XZ_PRESET, threads: int = 2,
                log: Log = lambda message: None) -> dict[str, Any]:
    """Write a stage into `out` (absent or empty) and return the manifest written to out/stage.json."""
    if sorted(library.role for library in libraries) != sorted(ROLES):
        raise StageError(f"a stage holds one library per role {ROLES}, got {[lib.role for lib in libraries]}")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise StageError(f"{out}: not empty")
    (out / "libs").mkdir()
    library_entries: list[dict[str, Any]] = []
    for library in libraries:
        digest = hashlib.sha256(library.data).hexdigest()
        packed = out / "libs" / f"{library.name}.xz"
        started = time.monotonic()
        method = compress_xz(library.data, packed, preset=preset, threads=threads)
        # Read back with the decompressor gpu_unpack uses, so a bad archive fails here and not on the GPU host.
        if hashlib.sha256(lzma.decompress(packed.read_bytes())).hexdigest() != digest:
            raise StageError(f"{packed}: does not decompress to {library.name}")
        log(f"{library.name}: {human_size(len(library.data))} -> {human_size(packed.stat().st_size)} "
            f"({method}, {time.monotonic() - started:.0f} s)")
        parts = split_file(packed, part_bytes)
        library_entries.append({
            "role": library.role, "name": library.name, "size": len(library.data), "sha256": digest,
            "compression": "xz", "parts": [part.relative_to(out).as_posix() for part in parts],
            "original_size": library.original_size, "original_sha256": library.original_sha256,
            "prune": library.prune.summary() if library.prune else None,
        })
    staged_wheels: list[str] = []
    if wheels:
        (out / "wheels").mkdir()
        for wheel in wheels:
            shutil.copyfile(wheel, out / "wheels" / wheel.name)
            staged_wheels.append(f"wheels/{wheel.name}")
    if include_dir is not None:
        shutil.copytree(include_dir, out / "include")
    files = {
        path.relative_to(out).as_posix(): {"size": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(out.rglob("*")) if path.is_file()
    }
    manifest = {
        "format": FORMAT, **meta, "libraries": library_entries, "wheels": staged_wheels,
        "include": "include" if include_dir is not None else None, "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def stage_size(out: Path) -> int:
    return sum(path.stat().st_size for path in out.rglob("*") if path.is_file())


def size_lines(out: Path) -> list[str]:
    """Per-file sizes (the headers as one line) and the total, in MiB."""
    rows: list[tuple[str, int]] = []
    include = [path for path in (out / "include").rglob("*") if path.is_file()] if (out / "include").is_dir() else []
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.is_relative_to(out / "include"):
            rows.append((path.relative_to(out).as_posix(), path.stat().st_size))
    if include:
        rows.append((f"include/ ({len(include)} files)", sum(path.stat().st_size for path in include)))
    width = max(len(name) for name, _ in rows)
    total = stage_size(out)
    lines = [f"  {name:<{width}}  {size:>12,} B  {size / 2**20:8.2f} MiB" for name, size in rows]
    lines.append(f"  {'total':<{width}}  {total:>12,} B  {total / 2**20:8.2f} MiB")
    return lines


def _replace_stage(partial: Path, out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)


def _check_out(out: Path) -> None:
    # Only a previous stage is replaced, never a directory someone put something else in.
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise StageError(f"{out}: exists and is not a stage (no {MANIFEST}); pick another --out or remove it")


def build(args: argparse.Namespace, log: Log) -> Path:
    out: Path = args.out.resolve()
    _check_out(out)
    cache: Path = args.cache
    if args.wheel is not None:
        wheel: Path = args.wheel
        if not wheel.is_file():
            raise StageError(f"{wheel}: no such file")
    else:
        wheel = cache / ort_wheel_name(args.ort_version)
        if not wheel.is_file():
            log(f"downloading onnxruntime-gpu=={args.ort_version} (about 250 MB) into {cache}")
            pip_download(f"onnxruntime-gpu=={args.ort_version}", cache, [ORT_PLATFORM])
            if not wheel.is_file():
                raise StageError(f"pip download onnxruntime-gpu=={args.ort_version} did not leave {wheel}")
    extra = [fetch_wheel(cache / "wheels", name, version, WHEEL_PLATFORMS, log)
             for name, version in EXTRA_WHEELS.items()]
    for staged in extra:
        if hits := version_checks(staged):
            raise StageError(f"{staged}: generated code checks the grpcio/protobuf version: {', '.join(hits)}")
    include_dir = args.include_dir or ort_include_dir()
    if not (include_dir / "onnxruntime_c_api.h").is_file():
        raise StageError(f"{include_dir}: no onnxruntime_c_api.h")
    libraries = wheel_libraries(wheel, args.ort_version, args.arch, log)
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    meta = {"ort_version": args.ort_version, "arch": args.arch, "ort_wheel": wheel.name,
            "ort_wheel_sha256": sha256_file(wheel), "part_bytes": int(args.part_mib * 2**20)}
    try:
        write_stage(partial, libraries=libraries, wheels=extra, include_dir=include_dir, meta=meta,
                    part_bytes=meta["part_bytes"], log=log)
        _replace_stage(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_stage", description="Stage ONNX Runtime CUDA libraries, wheels and headers for an offline GPU host.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(".gpu/stage"), help="stage directory (replaced)")
    parser.add_argument("--arch", type=int, default=90, help="the GPU's SM arch: every other cubin/PTX is zeroed")
    parser.add_argument("--part-mib", type=float, default=60, help="split compressed files larger than this")
    parser.add_argument("--ort-version", default="1.31.1", help="onnxruntime-gpu release")
    parser.add_argument("--wheel", type=Path, help="an onnxruntime-gpu wheel already downloaded (skips pip download)")
    parser.add_argument("--include-dir", type=Path, help="ORT C headers (default: scripts/fetch_ort_headers.sh)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="download cache")
    parser.add_argument("--max-mib", type=float, default=61, help="fail if the stage is larger")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def log(message: str) -> None:
        print(f"gpu_stage: {message}", file=sys.stderr, flush=True)

    if args.part_mib <= 0:
        log("--part-mib must be positive")
        return 1
    try:
        out = build(args, log)
    except StageError as error:
        log(str(error))
        return 1
    except OSError as error:
        log(f"{error.filename or '?'}: {error.strerror or error}")
        return 1
    print(f"stage {out}:")
    print("\n".join(size_lines(out)))
    total_mib = stage_size(out) / 2**20
    if total_mib > args.max_mib:
        log(f"{out}: {total_mib:.2f} MiB, over --max-mib {args.max_mib:g}")
        return 1
    return 0

