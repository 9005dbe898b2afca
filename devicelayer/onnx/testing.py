"""Helpers for testing and benchmarking ONNX models: the light_* models of the onnx package with
randomised weights, random inputs, and onnxruntime as the reference."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]


def onnx_data_dir() -> Path:
    import onnx

    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


def light_path(name: str) -> Path:
    """Path of ``light_<name>.onnx`` inside the installed onnx package."""
    return onnx_data_dir() / "light" / f"light_{name}.onnx"


def _consumers(graph: Any) -> dict[str, list[tuple[Any, int]]]:
    out: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def _weight(rng: np.random.Generator, shape: tuple[int, ...], role: tuple[str, int, Any] | None) -> np.ndarray:
    """Random values for a float constant, by the op and input slot that read it (magnitudes kept sane)."""
    op, slot, node = role or ("", -1, None)
    n = rng.standard_normal(shape)
    if op in ("Conv", "ConvTranspose") and slot == 1 and len(shape) > 1:
        fan_in = int(np.prod(shape[1:]))
        return n * np.sqrt(2.0 / max(fan_in, 1))
    if op in ("Gemm", "MatMul") and slot == 1 and len(shape) == 2:
        trans = op == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans else shape[0]
        return n * np.sqrt(1.0 / max(fan_in, 1))
    if op == "BatchNormalization":
        if slot == 1:
            return rng.uniform(0.5, 1.5, shape)
        if slot == 4:
            return rng.uniform(0.5, 1.5, shape)
        return n * 0.1
    if op == "Mul":
        return rng.uniform(0.5, 1.5, shape)
    return n * 0.05


def randomize_weights(model: Any, seed: int = 0, expose_logits: bool = True) -> Any:
    """A copy of ``model`` whose float weights (initializers and constant-input ConstantOfShape/Constant
    nodes) are random, seeded and scaled per role; with ``expose_logits`` the input of a final Softmax
    is a second graph output (a saturated softmax would hide errors)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    rng = np.random.default_rng(seed)
    readers = _consumers(g)
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}

    def role(name: str) -> tuple[str, int, Any] | None:
        for node, slot in readers.get(name, []):
            if node.op_type == "Unsqueeze":  # densenet/inception_v2: weight -> Unsqueeze -> Mul/Add
                return role(node.output[0])
            return node.op_type, slot, node
        return None

    new_inits = []
    keep_nodes = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in consts:
            shape = tuple(int(s) for s in consts[node.input[0]].reshape(-1))
            value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                         np.zeros(1, np.float32))
            if value.dtype.kind == "f":
                arr = _weight(rng, shape, role(node.output[0])).astype(value.dtype)
                new_inits.append(numpy_helper.from_array(arr, node.output[0]))
                continue
        keep_nodes.append(node)
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f" and arr.size > 1:
            init.CopyFrom(numpy_helper.from_array(_weight(rng, arr.shape, role(init.name)).astype(arr.dtype),
                                                  init.name))
    del g.node[:]
    g.node.extend(keep_nodes)
    g.initializer.extend(new_inits)
    model.ir_version = max(model.ir_version, 4)  # IR >= 4: initializers need not be graph inputs
    if expose_logits:
        outs = {o.name for o in g.output}
        wanted = [node.input[0] for node in g.node
                  if node.op_type == "Softmax" and node.output[0] in outs and node.input[0] not in outs]
        if wanted:
            inferred = onnx.shape_inference.infer_shapes(model)
            infos = {vi.name: vi for vi in inferred.graph.value_info}
            for name in wanted:
                if name in infos:
                    g.output.append(infos[name])
    return model


def random_inputs(model: Any, seed: int = 0, input_shapes: dict[str, Sequence[int]] | None = None
                  ) -> dict[str, np.ndarray]:
    """Random feeds for the non-initializer graph inputs (dynamic dims 1 unless given)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = (input_shapes or {}).get(vi.name) or tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim)
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        feeds[vi.name] = random_array(rng, shape, dt)
    return feeds


def random_array(rng: np.random.Generator, shape: Any, dtype: np.dtype) -> np.ndarray:
    """A random model input: normal floats, random booleans, small non-negative integers (valid indices)."""
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 4, shape).astype(dtype)


def onnxruntime_session(model: Any, threads: int | None = None) -> Any:
    """An onnxruntime CPU session of ``model`` (ModelProto or path)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    src = model if isinstance(model, (str, os.PathLike, bytes)) else model.SerializeToString()
    return ort.InferenceSession(str(src) if isinstance(src, os.PathLike) else src, opts,
                                providers=["CPUExecutionProvider"])


def onnxruntime_run(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    sess = onnxruntime_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def scaled_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| relative to the output's scale (max |want|, at least 1e-6)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    if not want.size:
        return 0.0
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-6))


def make_model(nodes: Sequence[Any], inputs: dict[str, np.ndarray], outputs: Sequence[str],
               initializers: dict[str, np.ndarray] | None = None, opset: int = 17, ir_version: int | None = None,
               dynamic: dict[str, Sequence[Any]] | None = None) -> Any:
    """A checked ModelProto from NodeProtos: graph inputs typed like the arrays of ``inputs`` (or with the
    dims of ``dynamic[name]``, which may hold dim_param strings), outputs typed by shape inference."""
    import onnx
    from onnx import helper, numpy_helper

    def info(name: str, arr: np.ndarray) -> Any:
        shape = list((dynamic or {}).get(name, arr.shape))
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), shape)

    graph = helper.make_graph(list(nodes), "test", [info(n, a) for n, a in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version or max(helper.find_min_ir_version_for(list(model.opset_import)), 4)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    untyped = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if untyped:  # shapes that depend on values (Range ...): take them from ONNX's reference evaluator
        from onnx.reference import ReferenceEvaluator

        got = ReferenceEvaluator(model).run([o.name for o in untyped], inputs)
        for o, arr in zip(untyped, got):
            o.CopyFrom(helper.make_tensor_value_info(o.name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
    onnx.checker.check_model(model)
    return model


def with_batch(model: Any, batch: int) -> Any:
    """A copy of ``model`` with batch ``batch``: the first dim of every graph input set, and constant
    Reshape targets that pin the batch to 1 changed to 0 (copy the input's dim)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    for vi in g.input:
        if vi.name not in inits and vi.type.tensor_type.shape.dim:
            vi.type.tensor_type.shape.dim[0].dim_value = batch
    for node in g.node:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]]).copy()
            if target.size and target[0] == 1:
                target[0] = 0
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    del g.value_info[:]
    for vo in g.output:
        if vo.type.tensor_type.shape.dim:
            vo.type.tensor_type.shape.dim[0].dim_value = batch
    return model
