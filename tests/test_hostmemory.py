"""Large host blocks (``devicelayer.hostmemory.block``): oneDNN's reordered weights and a model's weights, asked to be
backed by transparent huge pages where the kernel has them; the host pool's buffers stay NumPy's memory."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import hostmemory


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode ("always", "madvise", "never"), None where it has none."""
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    found = re.search(r"\[(\w+)\]", text)
    return found.group(1) if found else None


def _pages_kib(address: int, nbytes: int) -> tuple[int, int]:
    """(AnonHugePages, Rss) in KiB of this process's mappings overlapping ``nbytes`` from ``address``."""
    huge = rss = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if head:
                inside = int(head.group(1), 16) < address + nbytes and address < int(head.group(2), 16)
            elif inside and line.startswith("AnonHugePages:"):
                huge += int(line.split()[1])
            elif inside and line.startswith("Rss:"):
                rss += int(line.split()[1])
    return huge, rss


@pytest.mark.parametrize("nbytes", [0, 1, 100, 4096 + 3, (2 << 20) - 1, 2 << 20, (5 << 20) + 17])
def test_a_block_has_its_size_and_alignment_and_holds_what_is_written(nbytes, monkeypatch):
    for wanted in ("1", "0"):
        monkeypatch.setenv("DEVICELAYER_HUGE_PAGES", wanted)
        b = hostmemory.block(nbytes, populate=True)
        assert b.dtype == np.uint8 and b.shape == (nbytes,) and b.flags.c_contiguous and b.flags.writeable
        assert b.ctypes.data % 64 == 0 or nbytes == 0  # (an empty array's address is its base's)
        if wanted == "1" and nbytes >= hostmemory.HUGE_PAGE_BYTES and hasattr(__import__("mmap"), "MADV_HUGEPAGE"):
            assert b.ctypes.data % hostmemory.HUGE_PAGE_BYTES == 0
        data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
        b[:] = data
        np.testing.assert_array_equal(b, data)


@pytest.mark.parametrize("value,wanted", [("1", True), ("", True), ("0", False), ("off", False), ("NO", False)])
def test_huge_pages_are_turned_off_by_the_environment(value, wanted, monkeypatch):
    monkeypatch.setenv("DEVICELAYER_HUGE_PAGES", value)
    assert hostmemory.huge_pages_wanted() is wanted


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps")
def test_a_large_block_is_on_huge_pages_where_the_kernel_gives_them(monkeypatch):
    mode = _thp_mode()
    if mode not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages are {mode or 'absent'} here")
    monkeypatch.setenv("DEVICELAYER_HUGE_PAGES", "1")
    b = hostmemory.block(8 << 20, populate=True)
    assert _pages_kib(b.ctypes.data, b.nbytes)[0] >= 2048
    # a block of 2 MiB and a half: its whole 2 MiB on a huge page, the rest on ordinary pages (no rounding up)
    odd = hostmemory.block((5 << 20) // 2, populate=True)
    odd[:] = 1
    huge, rss = _pages_kib(odd.ctypes.data, odd.nbytes)
    assert huge >= 2048 and rss <= (5 << 10) // 2 + 4


def test_the_host_pools_large_buffers_are_aligned_and_move_data_right():
    host = dl.device("host")
    n = (6 << 20) // 4
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    buf = host.pool.allocate(x.nbytes, np.float32)
    try:
        assert host.pool.host_view(buf).ctypes.data % 64 == 0
        host.pool.upload(buf, x).wait()
        out = np.full(n, np.nan, np.float32)
        host.pool.download(buf, out).wait()
        np.testing.assert_array_equal(out, x)
    finally:
        host.pool.free(buf)


def test_a_models_weights_are_read_from_a_huge_page_block(tmp_path, monkeypatch):
    """A checked model file's raw weights (loaded again unchanged: one block, ``onnx/rawdata.py``) of 2 MiB or more
    are one such block, and the model runs right from it."""
    import onnx
    from onnx import helper, numpy_helper

    import devicelayer.onnx as dlo

    monkeypatch.setenv("DEVICELAYER_HUGE_PAGES", "1")
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((1024, 768)) / 30).astype(np.float32)  # 3 MiB
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 1024])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 768])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    dlo.load(str(path))  # checked: the second load parses the file from a mapping, its weights into one block
    loaded = dlo.load(str(path))
    (held,) = [v.constant for v in loaded.graph().values.values()
               if v.constant is not None and v.constant.shape == w.shape]
    np.testing.assert_array_equal(held, w)
    if os.path.exists("/proc/self/smaps") and _thp_mode() in ("always", "madvise"):
        assert held.ctypes.data % hostmemory.HUGE_PAGE_BYTES == 0  # (the block's first weight)
        assert _pages_kib(held.ctypes.data, held.nbytes)[0] >= 2048
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    got = loaded.compile(["host"]).run_numpy({"x": x})["y"]
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-4, atol=1e-4)
