"""The CPU classes int8 behaves differently on, read from /proc/cpuinfo text of each (trimmed real samples)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ortserve.bundle.cpu import cpu_info, parse_cpuinfo

EPYC_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr pae mce sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni
processor\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr pae mce sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni
"""
SKYLAKE_AVX512 = """model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
flags\t\t: fpu sse2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl
"""
SAPPHIRE_RAPIDS = """model name\t: Intel(R) Xeon(R) Processor
flags\t\t: avx avx2 avx512f avx512dq avx512bw avx512vl avx_vnni avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8
"""
ALDER_LAKE = """model name\t: 12th Gen Intel(R) Core(TM) i7-12700
flags\t\t: avx avx2 avx_vnni
"""


@pytest.mark.parametrize(("text", "model", "isa", "exact"), [
    (EPYC_AVX2, "AMD EPYC 7B13", "avx2", False),
    (SKYLAKE_AVX512, "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "avx512", False),
    (SAPPHIRE_RAPIDS, "Intel(R) Xeon(R) Processor", "amx", True),
    (ALDER_LAKE, "12th Gen Intel(R) Core(TM) i7-12700", "avx-vnni", True),
    ("", "unknown", "other", False),
])
def test_each_cpu_class(text: str, model: str, isa: str, exact: bool) -> None:
    cpu = parse_cpuinfo(text)
    assert (cpu.model, cpu.int8_isa, cpu.int8_exact_8bit) == (model, isa, exact)


def test_only_the_flags_that_matter_are_kept_and_described() -> None:
    cpu = parse_cpuinfo(SAPPHIRE_RAPIDS)
    assert cpu.flags == {"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "avx512_bf16",
                         "amx_bf16"}
    assert cpu.describe() == ("Intel(R) Xeon(R) Processor (AVX2, AVX-512, AVX-512BW, AVX-512 VNNI, AVX-VNNI, "
                              "AMX-INT8, AVX-512 BF16, AMX-BF16; int8 on amx)")
    assert cpu.bf16
    assert parse_cpuinfo(EPYC_AVX2).describe() == "AMD EPYC 7B13 (AVX2; int8 on avx2)"
    assert parse_cpuinfo(EPYC_AVX2).to_dict() == {"model": "AMD EPYC 7B13", "flags": ["avx2"], "int8_isa": "avx2",
                                                  "bf16": False}


def test_bf16_is_avx512_bf16_or_amx() -> None:
    """Zen 4 has AVX-512 BF16 without AMX; Sapphire Rapids both; an AVX-512 VNNI CPU neither."""
    zen4 = parse_cpuinfo("model name\t: AMD EPYC 9B14\nflags\t\t: avx2 avx512f avx512_vnni avx512_bf16\n")
    assert zen4.bf16 and not parse_cpuinfo(SKYLAKE_AVX512).bf16 and not parse_cpuinfo(EPYC_AVX2).bf16


def test_this_machine_and_an_unreadable_file(tmp_path: Path) -> None:
    here = cpu_info()
    assert here.model != "" and here.int8_isa in ("amx", "avx512-vnni", "avx-vnni", "avx512", "avx2", "other")
    assert cpu_info(tmp_path / "missing").int8_isa == "other"
