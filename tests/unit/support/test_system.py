"""mgtutor.support.system: the CPU a run names (its model and the features that decide fast arithmetic)."""

from __future__ import annotations

from mgtutor.support.system import CPU_FEATURES, cpu, describe_cpu, machine


def test_the_cpu_is_named_with_the_features_it_has():
    info = cpu()
    assert info["model"] and info["model"] != "unknown"
    assert set(info["features"]) <= set(CPU_FEATURES)
    assert [f for f in CPU_FEATURES if f in info["features"]] == info["features"]  # in CPU_FEATURES' order
    assert machine()["cpu"] == info


def test_a_cpu_is_described_with_its_amx_or_its_absence():
    epyc = {"model": "AMD EPYC", "features": ["avx2", "avx512f", "avx512_bf16"]}
    assert describe_cpu(epyc) == "AMD EPYC (avx2, avx512f, avx512_bf16; no AMX)"
    xeon = {"model": "Intel(R) Xeon(R) Processor", "features": ["avx512f", "amx_tile", "amx_bf16"]}
    assert describe_cpu(xeon) == "Intel(R) Xeon(R) Processor (avx512f, amx_tile, amx_bf16)"
    assert describe_cpu({"model": "Apple M2", "features": []}) == "Apple M2 (no AVX2, AVX-512 or AMX; no AMX)"
