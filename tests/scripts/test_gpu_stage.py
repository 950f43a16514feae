"""scripts/gpu_stage + scripts/gpu_unpack on synthetic inputs: fatbin pruning, xz parts, a whole stage and its unpack.

No network and no real onnxruntime-gpu wheel: fatbins, libraries and wheels are built here, a few KB each.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ortserve_devtools.gpu import stage, unpack

ROOT = Path(__file__).resolve().parents[2]
MAGIC = struct.pack("<I", stage.FATBIN_MAGIC)
ARCH = 90


def _random(rng: random.Random, size: int) -> bytes:
    """Random bytes without the fatbin magic (which would start a wrapper by chance)."""
    data = rng.randbytes(size)
    return data.replace(MAGIC, b"\0\0\0\0")


def _entry(kind: int, arch: int, payload: bytes, *, flags: int = 0x8011, compressed_size: int = 0) -> bytes:
    header = struct.pack("<HHIQIIHHI", kind, 0x0101, 64, len(payload), compressed_size, 0, 8, 1, arch)
    header += b"\xab" * (40 - len(header)) + struct.pack("<Q", flags)
    return header + b"\xcd" * (64 - len(header)) + payload


def _wrapper(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", stage.FATBIN_MAGIC, 1, 16, len(body)) + body


class Blob:
    """Random bytes around two wrappers: [elf sm_80 (compressed), elf sm_90, ptx sm_80] and [elf sm_120]."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        # A magic whose header is not version 1 / size 16: random data, not a wrapper.
        prefix = _random(rng, 300) + struct.pack("<IHHQ", stage.FATBIN_MAGIC, 7, 24, 64) + _random(rng, 201)
        sm80 = _random(rng, 1000)
        sm90 = _random(rng, 1500)
        ptx = b".version 8.0\n.target sm_80\n" + _random(rng, 700)
        sm120 = _random(rng, 900)
        first = _wrapper(_entry(2, 80, sm80, flags=0x8011 | stage.FLAG_COMPRESSED, compressed_size=990),
                         _entry(2, ARCH, sm90), _entry(1, 80, ptx))
        second = _wrapper(_entry(2, 120, sm120))
        middle = _random(rng, 123)
        self.data = prefix + first + middle + second + _random(rng, 77)
        self.first = len(prefix)
        self.second = self.first + len(first) + len(middle)
        self.second_end = self.second + len(second)
        # Payload offsets: wrapper header 16, entry header 64.
        sm80_at = self.first + 16 + 64
        sm90_at = sm80_at + len(sm80) + 64
        ptx_at = sm90_at + len(sm90) + 64
        self.zeroed = [(sm80_at, sm80_at + len(sm80)), (ptx_at, ptx_at + len(ptx))]
        self.sm90 = (sm90_at, sm90_at + len(sm90))


def test_prune_zeroes_other_arches_only_where_the_target_exists() -> None:
    blob = Blob()
    pruned, report = stage.prune_fatbins(blob.data, ARCH)

    expected = bytearray(blob.data)
    for start, end in blob.zeroed:
        expected[start:end] = bytes(end - start)
    assert pruned == expected  # headers, the sm_90 payload, the sm_120-only wrapper and the filler are unchanged
    assert any(blob.data[start:end] != bytes(end - start) for start, end in blob.zeroed)
    assert pruned[blob.sm90[0]:blob.sm90[1]] == blob.data[blob.sm90[0]:blob.sm90[1]]
    assert pruned[blob.second:blob.second_end] == blob.data[blob.second:blob.second_end]

    assert (report.wrappers, report.pruned_wrappers) == (2, 1)
    assert report.zeroed_entries == 2
    assert report.zeroed_bytes == sum(end - start for start, end in blob.zeroed)
    assert report.zeroed_compressed == 1
    assert report.kept_entries == 2
    assert report.lacking == [(blob.second, ("elf sm_120",))]
    assert report.summary()["wrappers_without_arch"] == [{"offset": blob.second, "entries": ["elf sm_120"]}]


def test_prune_refuses_an_arch_no_wrapper_has() -> None:
    with pytest.raises(stage.FatbinError, match="no fatbin wrapper has an sm_100 cubin"):
        stage.prune_fatbins(Blob().data, 100)
    # A wrapper with only sm_120 PTX has no sm_120 cubin either.
    only_ptx = b"x" * 10 + _wrapper(_entry(1, 120, b"ptx"))
    with pytest.raises(stage.FatbinError, match="sm_120"):
        stage.prune_fatbins(only_ptx, 120)


def test_prune_refuses_entries_that_do_not_tile_the_wrapper() -> None:
    entry = _entry(2, ARCH, b"y" * 100)
    broken = struct.pack("<IHHQ", stage.FATBIN_MAGIC, 1, 16, len(entry) - 8) + entry + b"z" * 64
    with pytest.raises(stage.FatbinError, match="does not fit"):
        stage.prune_fatbins(broken, ARCH)
    bad_compressed = _wrapper(_entry(2, ARCH, b"y" * 100, flags=stage.FLAG_COMPRESSED, compressed_size=500))
    with pytest.raises(stage.FatbinError, match="compressed entry"):
        stage.prune_fatbins(bad_compressed, ARCH)


def _elf(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 little-endian file with the given sections, a string table last."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name in [*sections, ".shstrtab"])
    body = bytearray(b"\x7fELF\x02\x01\x01" + bytes(64 - 7))
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    name_at = 1
    for name, content in [*sections.items(), (".shstrtab", names)]:
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, len(body), len(content), 0, 0, 1, 0))
        name_at += len(name) + 1
        body += content
    shoff = len(body)
    body += b"".join(headers)
    struct.pack_into("<Q", body, 0x28, shoff)
    struct.pack_into("<HHH", body, 0x3A, 64, len(headers), len(headers) - 1)
    return bytes(body)


def test_prune_reads_only_the_nv_fatbin_section_of_an_elf_file() -> None:
    inside = _wrapper(_entry(2, 80, b"a" * 50), _entry(2, ARCH, b"b" * 60))
    outside = _wrapper(_entry(2, 80, b"c" * 70), _entry(2, ARCH, b"d" * 80))
    elf = _elf({".text": b"\x90" * 40 + outside, ".nv_fatbin": inside})
    pruned, report = stage.prune_fatbins(elf, ARCH)
    assert (report.wrappers, report.zeroed_bytes) == (1, 50)
    assert b"a" * 50 not in pruned and b"c" * 70 in pruned and b"b" * 60 in pruned
    with pytest.raises(stage.FatbinError, match="no fatbin wrapper"):
        stage.prune_fatbins(_elf({".text": outside}), ARCH)


def test_compress_split_reassemble_round_trip(tmp_path: Path) -> None:
    rng = random.Random(1)
    data = rng.randbytes(1 << 20) + b"cubin payload, padded " * 40_000 + rng.randbytes(200_000)
    for threads in (2, 1):  # the xz CLI (when present) and Python's lzma
        packed = tmp_path / f"lib{threads}.so.xz"
        stage.compress_xz(data, packed, preset=6, threads=threads)
        parts = stage.split_file(packed, 256 * 1024)
        assert len(parts) > 2 and not packed.exists()
        assert [part.name for part in parts][:2] == [f"lib{threads}.so.xz.000", f"lib{threads}.so.xz.001"]
        assert all(part.stat().st_size <= 256 * 1024 for part in parts)
        out = tmp_path / f"lib{threads}.so"
        unpack.decompress_parts(parts, out, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        assert out.read_bytes() == data

    with pytest.raises(unpack.UnpackError, match="ends early"):
        unpack.decompress_parts(parts[:-1], tmp_path / "short.so", sha256="0" * 64, size=len(data))
    assert not (tmp_path / "short.so").exists() and not (tmp_path / "short.so.partial").exists()


def _wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel pip installs."""
    dist = f"{name.replace('-', '_')}-{version}"
    contents = {
        **files,
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in contents.items():
            archive.writestr(member, text)
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def staged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """A stage from gpu_stage's main(): a fake onnxruntime-gpu wheel, fake cached wheels, fake headers."""
    rng = random.Random(2)
    libs = {"libonnxruntime.so.1.2.3": rng.randbytes(40_000) + bytes(60_000),
            "libonnxruntime_providers_shared.so": rng.randbytes(3_000),
            "libonnxruntime_providers_cuda.so": Blob(3).data * 3}
    ort_wheel = tmp_path / "onnxruntime_gpu-1.2.3-cp312-cp312-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(ort_wheel, "w") as archive:
        for name, data in libs.items():
            archive.writestr(f"onnxruntime/capi/{name}", data)
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    for index, (name, version) in enumerate(stage.EXTRA_WHEELS.items()):
        _wheel(cache / "wheels", name, version, {f"fakepkg{index}/__init__.py": f"NAME = {name!r}\n"})
    include = tmp_path / "headers"
    (include / "core").mkdir(parents=True)
    (include / "onnxruntime_c_api.h").write_text("/* C API */\n")
    (include / "core" / "providers.h").write_text("/* providers */\n")
    out = tmp_path / "stage"
    rc = stage.main(["--out", str(out), "--wheel", str(ort_wheel), "--ort-version", "1.2.3", "--arch", str(ARCH),
                     "--include-dir", str(include), "--cache", str(cache), "--part-mib", str(2_000 / 2**20)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert "total" in printed.out
    return {"out": out, "libs": libs, "ort_wheel": ort_wheel, "include": include, "cache": cache}


def _run_unpack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_unpack"), *args],
                          capture_output=True, text=True, check=False)


def test_stage_then_unpack_lays_out_capi_and_prints_exports(staged: dict[str, object], tmp_path: Path) -> None:
    out = staged["out"]
    libs = staged["libs"]
    assert isinstance(out, Path) and isinstance(libs, dict)
    manifest = unpack.load_manifest(out)
    assert manifest["ort_version"] == "1.2.3" and manifest["arch"] == ARCH
    cuda = next(lib for lib in manifest["libraries"] if lib["role"] == "cuda")
    assert len(cuda["parts"]) > 1  # split at the tiny --part-mib
    assert cuda["original_sha256"] == hashlib.sha256(libs["libonnxruntime_providers_cuda.so"]).hexdigest()
    assert cuda["prune"]["zeroed_entries"] == 6 and cuda["sha256"] != cuda["original_sha256"]
    assert len(manifest["wheels"]) == len(stage.EXTRA_WHEELS)
    assert set(manifest["files"]) >= {"include/onnxruntime_c_api.h", "include/core/providers.h"}

    dest = tmp_path / "ort"
    first = _run_unpack("--stage", str(out), "--dest", str(dest))
    assert first.returncode == 0, first.stderr
    capi = dest / "onnxruntime" / "capi"
    assert (capi / "libonnxruntime.so.1.2.3").read_bytes() == libs["libonnxruntime.so.1.2.3"]
    assert (capi / "libonnxruntime_providers_shared.so").read_bytes() == libs["libonnxruntime_providers_shared.so"]
    pruned, _ = stage.prune_fatbins(libs["libonnxruntime_providers_cuda.so"], ARCH)
    assert (capi / "libonnxruntime_providers_cuda.so").read_bytes() == pruned
    assert os.readlink(capi / "libonnxruntime.so") == "libonnxruntime.so.1"
    assert os.readlink(capi / "libonnxruntime.so.1") == "libonnxruntime.so.1.2.3"
    assert (dest / "site" / "fakepkg0" / "__init__.py").is_file()

    lines = first.stdout.splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "export ORTSERVE_ONNXRUNTIME_LIB", "export ORT_INCLUDE_DIR", "export PYTHONPATH", "export LD_LIBRARY_PATH"]
    shown = subprocess.run(
        ["bash", "-c", 'eval "$1"; echo "$ORTSERVE_ONNXRUNTIME_LIB"; echo "$ORT_INCLUDE_DIR"; echo "$PYTHONPATH"; '
         'echo "$LD_LIBRARY_PATH"', "bash", first.stdout],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": "/old/lib"},
    ).stdout.splitlines()
    assert shown[0] == str(capi.resolve() / "libonnxruntime.so.1.2.3")
    assert shown[1] == str(out.resolve() / "include")
    assert shown[2] == str(dest.resolve() / "site")  # PYTHONPATH was unset: no trailing ':'
    assert shown[3].startswith(f"{capi.resolve()}:") and shown[3].endswith(":/old/lib")

    before = {path: path.stat().st_mtime_ns for path in capi.iterdir()}
    second = _run_unpack("--stage", str(out), "--dest", str(dest))
    assert second.returncode == 0 and second.stdout == first.stdout
    assert "already matches" in second.stderr
    assert {path: path.stat().st_mtime_ns for path in capi.iterdir()} == before

    # Not real libraries: --check names the first one that fails to load, and why, in one line.
    checked = _run_unpack("--stage", str(out), "--dest", str(dest), "--check")
    assert checked.returncode == 1 and checked.stdout == ""
    failure = checked.stderr.splitlines()[-1]
    assert failure.startswith(f"gpu_unpack: {capi.resolve() / 'libonnxruntime.so.1.2.3'}: does not load")


def test_unpack_names_a_corrupted_part(staged: dict[str, object], tmp_path: Path) -> None:
    out = staged["out"]
    assert isinstance(out, Path)
    part = out / "libs" / "libonnxruntime_providers_cuda.so.xz.001"
    damaged = bytearray(part.read_bytes())
    damaged[100] ^= 0xFF
    part.write_bytes(damaged)
    result = _run_unpack("--stage", str(out), "--dest", str(tmp_path / "ort"))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "libonnxruntime_providers_cuda.so.xz.001" in result.stderr and "sha256" in result.stderr
    assert not (tmp_path / "ort" / unpack.MARKER).exists()


def test_stage_over_max_mib_fails_in_one_line(staged: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    out = staged["out"]
    assert isinstance(out, Path)
    rc = stage.main(["--out", str(out), "--wheel", str(staged["ort_wheel"]), "--ort-version", "1.2.3",
                     "--include-dir", str(staged["include"]), "--cache", str(staged["cache"]), "--max-mib", "0.01"])
    err = capsys.readouterr().err
    assert rc == 1 and "over --max-mib 0.01" in err.splitlines()[-1]


def test_stage_refuses_to_replace_a_directory_that_is_not_a_stage(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    rc = stage.main(["--out", str(tmp_path / "mine"), "--wheel", str(tmp_path / "none.whl")])
    assert rc == 1 and "is not a stage" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_version_checks_flag_generated_code_that_pins_grpcio(tmp_path: Path) -> None:
    pinned = _wheel(tmp_path, "grpcio-health-checking", "9.9.9",
                    {"grpc_health/v1/health_pb2_grpc.py": "GRPC_GENERATED_VERSION = '9.9.9'\n"})
    plain = _wheel(tmp_path, "grpcio-reflection", "1.0.0", {"grpc_reflection/__init__.py": "\n"})
    assert stage.version_checks(pinned) == ["grpc_health/v1/health_pb2_grpc.py (GRPC_GENERATED_VERSION)"]
    assert stage.version_checks(plain) == []


def test_nvidia_lib_dirs_and_check_loads(tmp_path: Path) -> None:
    for lib in ("cu13/lib/libcublas.so.13", "cudnn/lib/libcudnn.so.9", "cu13/include/cuda.h", "nccl/lib/README"):
        (tmp_path / "nvidia" / lib).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "nvidia" / lib).write_text("")
    found = unpack.nvidia_lib_dirs([tmp_path / "nvidia"])
    assert found == [tmp_path / "nvidia" / "cu13" / "lib", tmp_path / "nvidia" / "cudnn" / "lib"]

    assert unpack.check_loads([Path("libm.so.6")], []) is None
    (tmp_path / "fake.so").write_bytes(b"not an ELF file" * 100)
    problem = unpack.check_loads([Path("libm.so.6"), tmp_path / "fake.so"], [tmp_path])
    assert problem is not None and problem[0] == str(tmp_path / "fake.so") and "ELF" in problem[1]
    missing = unpack.check_loads([Path("libnot-there.so.7")], [])
    assert missing is not None and missing[0] == "libnot-there.so.7" and "cannot open" in missing[1]
