"""The CPU a model runs on, as ONNX Runtime's int8 kernels see it: its model name and the instruction sets they use.

On x86-64, ONNX Runtime multiplies uint8 activations by int8 weights with VNNI (`VPDPBUSD`) or AMX where the CPU
has them: exact int32 sums, and about twice FP32's speed for a BERT encoder. Without them (AVX2, or AVX-512 without
VNNI) it uses `VPMADDUBSW`, whose int16 pair sums saturate unless the weights keep to 7 bits, and int8 is about
as fast as FP32. The gate's report, `registry optimize` and `ortserve status` name the class with `int8_isa`.

Read from /proc/cpuinfo (Linux): its flags are what the kernel enabled, as the kernels' own dispatch finds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
# /proc/cpuinfo flag -> the name reports use, in report order.
FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512bw": "AVX-512BW", "avx512_vnni": "AVX-512 VNNI",
         "avx_vnni": "AVX-VNNI", "amx_int8": "AMX-INT8", "avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX-BF16"}


@dataclass(frozen=True)
class CpuInfo:
    model: str
    """The model name the CPU reports, e.g. "AMD EPYC 7B13"; "unknown" where none is given."""
    flags: frozenset[str]
    """Those of FLAGS that the CPU has and the kernel enabled."""

    @property
    def int8_isa(self) -> str:
        """The instruction set int8 matrix products run on: amx, avx512-vnni, avx-vnni, avx512, avx2 or other."""
        for flag, isa in (("amx_int8", "amx"), ("avx512_vnni", "avx512-vnni"), ("avx_vnni", "avx-vnni"),
                          ("avx512bw", "avx512"), ("avx2", "avx2")):
            if flag in self.flags:
                return isa
        return "other"

    @property
    def int8_exact_8bit(self) -> bool:
        """Whether full 8-bit weights multiply exactly here (VNNI or AMX); elsewhere only 7-bit weights do."""
        return self.int8_isa in ("amx", "avx512-vnni", "avx-vnni")

    @property
    def bf16(self) -> bool:
        """Whether the CPU computes in bf16 (AVX-512 BF16 or AMX), which the bf16 precision needs."""
        return bool(self.flags & {"avx512_bf16", "amx_bf16"})

    def describe(self) -> str:
        """ "AMD EPYC 7B13 (AVX2; int8 on avx2)": for reports and log lines."""
        names = [name for flag, name in FLAGS.items() if flag in self.flags]
        return f"{self.model} ({', '.join(names) or 'no AVX2'}; int8 on {self.int8_isa})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "flags": sorted(self.flags), "int8_isa": self.int8_isa, "bf16": self.bf16}


def parse_cpuinfo(text: str) -> CpuInfo:
    """The first processor's model name and flags from /proc/cpuinfo's text."""
    model, flags = "unknown", frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = " ".join(value.split()) or "unknown"
        elif key == "flags" and not flags:
            flags = frozenset(value.split()) & FLAGS.keys()
        if model != "unknown" and flags:
            break
    return CpuInfo(model=model, flags=flags)


def cpu_info(path: Path = CPUINFO) -> CpuInfo:
    """This machine's CPU; unknown (no flags) where /proc/cpuinfo cannot be read."""
    try:
        return parse_cpuinfo(path.read_text(errors="replace"))
    except OSError:
        return CpuInfo(model="unknown", flags=frozenset())
