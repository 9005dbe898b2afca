"""The host's BLAS report in DeviceInfo.extras (library, kernels picked for this CPU, threads, hint)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import devicelayer as dl
from backends.host.blas import _cpu_flags, _loaded_openblas, blas_extras

OPENBLAS = bool(_loaded_openblas()) or bool(blas_extras())
AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= _cpu_flags()


def _host_extras(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info", "--json"], capture_output=True,
                         text=True, env={**os.environ, **env}, timeout=120, check=True).stdout
    return next(d["extras"] for d in json.loads(out)["devices"] if d["id"] == "host")


@pytest.mark.skipif(not OPENBLAS, reason="NumPy here does not run on OpenBLAS")
def test_host_info_names_the_blas_and_its_kernels():
    extras = dl.device("host").info.extras
    assert extras["blas"].startswith("OpenBLAS") and extras["blas_kernels"]
    assert extras["blas_kernels"] in extras["blas"]  # the configuration string names the kernels in use
    assert extras["blas_threads"] >= 1
    assert ("blas_hint" in extras) == (AVX512 and extras["blas_kernels"].lower() not in
                                       ("skylakex", "cooperlake", "sapphirerapids"))


@pytest.mark.skipif(not (OPENBLAS and AVX512), reason="needs OpenBLAS on an AVX-512 CPU")
def test_forcing_the_avx512_kernels_is_reported_and_silences_the_hint():
    extras = _host_extras({"OPENBLAS_CORETYPE": "SkylakeX"})
    assert extras["blas_kernels"] == "SkylakeX" and "blas_hint" not in extras
    extras = _host_extras({"OPENBLAS_CORETYPE": "Haswell"})
    assert extras["blas_kernels"] == "Haswell" and "OPENBLAS_CORETYPE=SkylakeX" in extras["blas_hint"]
    assert "OPENBLAS_CORETYPE=Haswell in the environment" in extras["blas_hint"]
