"""Models shipped with devicelayer, built with onnx.helper from seeded random weights.

``tiny_gpt``: a two-layer GPT-2-style decoder with a KV cache (``devicelayer/onnx/tiny_gpt.py``), for
``devicelayer generate``.

``tiny_cnn``: x (N, 3, 32, 32) -> Conv 3x3 (8) -> Relu -> MaxPool 2 -> Conv 3x3 (16) -> Relu -> MaxPool 2
-> Flatten -> Gemm (10) -> Softmax.  Opset 17, about 12k weights, 165 KFLOP per image.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..diskcache import cache_dir, write
from ..errors import InvalidArgument

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "models"


def tiny_cnn(seed: int = 0) -> Any:
    """The tiny CNN as an onnx.ModelProto."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int, scale: float) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [w("conv1.w", 8, 3, 3, 3, scale=0.3), w("conv1.b", 8, scale=0.1),
             w("conv2.w", 16, 8, 3, 3, scale=0.15), w("conv2.b", 16, scale=0.1),
             w("fc.w", 10, 16 * 8 * 8, scale=0.05), w("fc.b", 10, scale=0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], "pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], "relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], "pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], "flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], "fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], "softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "tiny_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="devicelayer")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _tiny_gpt() -> Any:
    from .tiny_gpt import tiny_gpt

    return tiny_gpt()


BUILDERS: dict[str, Callable[[], Any]] = {"tiny_cnn": tiny_cnn, "tiny_gpt": _tiny_gpt}


def bundled_path(name: str) -> Path:
    """The file of bundled model ``name``: the packaged copy, else one built into the disk cache (or, where that
    cannot be written, into a temporary folder)."""
    if name not in BUILDERS:
        raise InvalidArgument(f"no bundled model {name!r}; there are {sorted(BUILDERS)}")
    packaged = PACKAGE_DIR / f"{name}.onnx"
    if packaged.is_file():
        return packaged
    path = cache_dir() / "models" / f"{name}.onnx"
    if not path.is_file():
        data = BUILDERS[name]().SerializeToString()
        if not write(path, data):
            path = Path(tempfile.mkdtemp(prefix="devicelayer-models-")) / f"{name}.onnx"
            path.write_bytes(data)
    return path


def write_packaged() -> None:
    """Regenerate the packaged model files (``python -m devicelayer.onnx.models``)."""
    import onnx

    PACKAGE_DIR.mkdir(exist_ok=True)
    for name, build in BUILDERS.items():
        onnx.save(build(), str(PACKAGE_DIR / f"{name}.onnx"))


if __name__ == "__main__":
    write_packaged()
