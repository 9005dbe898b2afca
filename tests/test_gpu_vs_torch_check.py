"""The GPU benchmark's output check (``benchmarks.gpu_vs_torch.accepted``): half precision judged against the float32
model's output with PyTorch's own half-precision error as the yardstick."""

from __future__ import annotations

from benchmarks.gpu_vs_torch import accepted


def test_float32_within_its_tolerance_of_pytorch():
    assert accepted("float32", 5e-4, None, None)
    assert not accepted("float32", 5e-3, None, None)
    assert accepted("float32", 5e-3, None, None, tf32=True)
    assert not accepted("float32", 5e-3, 1e-4, 1e-4)  # (float32 is never judged against itself)


def test_half_precision_no_further_from_float32_than_twice_pytorchs_own_half_output():
    assert accepted("float16", 1e-2, 5e-2, 5e-3)  # close to PyTorch's half output
    assert accepted("float16", 4e-2, 5e-2, 3e-2)  # a deep network: both far from each other and from float32
    assert not accepted("float16", 4e-2, 7e-2, 3e-2)  # further from float32 than twice PyTorch's own error
    assert not accepted("float16", 4e-2, None, None)
    assert accepted("float16", 4e-2, 1.5e-2, 1e-3)  # within the half tolerance of float32 itself
    assert not accepted("bfloat16", 0.2, 0.3, 0.1)
