"""Large host copies split across threads (``devicelayer.hostcopy``): every element copied, at piece edges too;
small, non-contiguous, overlapping and mistyped copies as ``np.copyto`` does them; misuse refused as NumPy refuses it."""

import numpy as np
import pytest

from devicelayer import hostcopy


@pytest.mark.parametrize("nbytes", [hostcopy.PARALLEL_LEAST - 4, hostcopy.PARALLEL_LEAST, 9633792 + 12])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float64])
def test_every_element_is_copied(rng, nbytes, dtype):
    n = nbytes // np.dtype(dtype).itemsize
    src = rng.integers(0, 200, n).astype(dtype).reshape(-1, 1) if n % 2 else rng.integers(0, 200, n).astype(dtype)
    dst = np.full(src.shape, 255, dtype)
    hostcopy.copy_into(dst, src)
    np.testing.assert_array_equal(dst, src)


def test_the_caller_sees_the_whole_copy_at_once(rng, monkeypatch):
    """Pieces on other threads are finished when the call returns, whatever their number."""
    monkeypatch.setattr(hostcopy.cpus, "count", lambda: 16)
    src = rng.standard_normal((16, 3, 224, 224)).astype(np.float32)
    for _ in range(20):
        dst = np.empty_like(src)
        hostcopy.copy_into(dst, src)
        assert np.array_equal(dst, src)


def test_other_copies_behave_as_numpy(rng):
    big = rng.standard_normal((2048, 1024)).astype(np.float32)
    strided = np.empty((2048, 2048), np.float32)[:, ::2]  # (not contiguous)
    hostcopy.copy_into(strided, big)
    np.testing.assert_array_equal(strided, big)
    row = rng.standard_normal(1024).astype(np.float32)  # (broadcast)
    out = np.empty_like(big)
    hostcopy.copy_into(out, row)
    np.testing.assert_array_equal(out, np.broadcast_to(row, big.shape))
    overlap = np.arange(4 << 20, dtype=np.uint8)
    want = overlap.copy()
    hostcopy.copy_into(overlap[1:], overlap[:-1])
    np.testing.assert_array_equal(overlap[1:], want[:-1])


def test_misuse_is_refused_as_numpy_refuses_it(rng):
    src = rng.standard_normal((1024, 1024)).astype(np.float64)
    with pytest.raises(TypeError):
        hostcopy.copy_into(np.empty((1024, 1024), np.float32), src)  # (casting="no")
    with pytest.raises(ValueError):
        hostcopy.copy_into(np.empty((1024, 1023), np.float64), src)
    frozen = np.empty((1024, 1024), np.float64)
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        hostcopy.copy_into(frozen, src)
