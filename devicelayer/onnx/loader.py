"""ONNX model -> devicelayer: reading and checking models, the conversion context converters work with, and
``load``.

``load`` gives an ``OnnxModel`` (``devicelayer/onnx/model.py``): the model with its symbolic input
dimensions, compiled into a plan that is specialised per signature of input shapes.  ``convert`` gives the
Graph of one signature.  Converters (``converters/``) turn one ONNX node into library ops through the
``Context``; the walk over the nodes is ``walk.py``.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import warnings

from .. import diskcache
from ..errors import GraphError, InvalidArgument, UnsupportedOp
from ..graph.ir import Graph, Value
from . import rawdata
from .validate import check_model
from .walk import NeedHost, NeedValues


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency of this front end
        raise UnsupportedOp("the ONNX front end needs the 'onnx' package (pip install onnx)") from exc
    return onnx


def np_dtype(elem_type: int) -> np.dtype:
    """NumPy dtype of an ONNX TensorProto element type: numbers and bool, bfloat16, float8, float4, int4/int2
    (``devicelayer.dtypes``); UnsupportedOp for strings, complex numbers and float6; GraphError for a number that
    is no ONNX element type."""
    from ..dtypes import is_number

    onnx = _onnx()
    if elem_type not in onnx.TensorProto.DataType.values() or elem_type == onnx.TensorProto.UNDEFINED:
        raise GraphError(f"element type {elem_type} is no ONNX element type")
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        name = onnx.TensorProto.DataType.Name(elem_type)
        raise UnsupportedOp(f"ONNX element type {name} has no NumPy dtype") from None
    if not is_number(dt):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "UNDEFINED"
        raise UnsupportedOp(f"ONNX element type {name} is not supported (numbers and bool only)")
    return dt


def read_model(source: Any) -> Any:
    """A checked ModelProto from a path, bytes or a ModelProto; GraphError when it is malformed."""
    model, raw = _read(source)
    if raw is not None:  # (parsed without its large raw_data: the message is given whole)
        for init in model.graph.initializer:
            rawdata.give_back(init, raw.get(init.name))
    return model


def _read(source: Any) -> tuple[Any, dict[str, np.ndarray] | None]:
    """``read_model``'s model, with the raw bytes of its initializers where they were copied from the file's
    mapping (``rawdata.read``), else None."""
    onnx = _onnx()
    serialized: bytes | None = None  # the model's bytes, where the checker may read them (no external data)
    stamp: Path | None = None  # where a file's passing is recorded
    checked, raw = False, None  # (a file that passed before: not checked again)
    if isinstance(source, onnx.ModelProto):
        model = source
    elif isinstance(source, (bytes, bytearray)):
        serialized = bytes(source)
        model = onnx.ModelProto()
        try:
            model.ParseFromString(serialized)
        except Exception as exc:
            raise GraphError(f"not an ONNX model (the protobuf does not parse): {exc}") from None
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise GraphError(f"no ONNX model file at {str(path)!r}")
        # a file that passed both checks before, as it is now, is not checked again: it is parsed from a mapping
        # of the file (no copy of its bytes in this process besides the parsed model's own)
        stamp = _passed_stamp(path)
        checked = stamp is not None and stamp.exists()
        try:
            model, raw = _parse_mapped(path) if checked else (None, None)
            if model is None:
                serialized = path.read_bytes()
                model = onnx.ModelProto()
                model.ParseFromString(serialized)
        except Exception as exc:
            raise GraphError(f"{path}: not an ONNX model (the protobuf does not parse): "
                             f"{type(exc).__name__}: {exc}") from None
        if _load_external_data(model, path.parent):
            serialized, stamp, checked, raw = None, None, False, None
    else:
        raise InvalidArgument(f"load: expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    if not model.graph.node and not model.graph.output:
        raise GraphError("the ONNX model fails the checker: it has an empty graph")
    if checked:
        return model, raw
    stamp = stamp if serialized else None  # (only a file read whole is stamped: external data is checked each time)
    try:
        # full_check=False: the checker's structural checks; shapes are inferred per signature when compiled.
        # Given the bytes it was read from, the checker parses them itself instead of having the model serialized
        onnx.checker.check_model(serialized if serialized is not None else model)
    except Exception as exc:
        first = " ".join(str(exc).strip().splitlines()[:3])[:500]
        if not _loads_anyway(model):
            raise GraphError(f"the ONNX model fails the checker: {first}") from None
        # what onnxruntime loads, devicelayer loads: an IR-3 model whose initializers are not graph inputs, ...
        check_model(model)  # what the checker found must not be malformed data
        warnings.warn(f"the ONNX model breaks the ONNX spec ({first}); loading it anyway, as onnxruntime does",
                      stacklevel=4)
        return model, None
    check_model(model)
    if stamp is not None:
        diskcache.write(stamp, b"")
    return model, None


def _parse_mapped(path: Path) -> tuple[Any, dict[str, np.ndarray] | None]:
    """The ModelProto parsed from a read-only mapping of the file, and its initializers' raw bytes copied from
    the mapping (``rawdata.read``; None where that did not match); the mapping is gone when this returns (the
    parsed message and the bytes are copies).  The message is parsed without its large initializers' raw_data
    (``rawdata.stripped``), which the bytes then hold alone; where they cannot be read so, it is parsed whole.
    (None, None) where the file cannot be mapped (empty, special)."""
    onnx = _onnx()
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            with memoryview(mapped) as view:
                found = rawdata.spans(view)
                light = rawdata.stripped(view) if found is not None else None
                if light is not None:
                    model = onnx.ModelProto()
                    model.ParseFromString(light)
                    raw = rawdata.read(view, model.graph.initializer, found)
                    if raw is not None:
                        return model, raw
                model = onnx.ModelProto()
                try:
                    model.ParseFromString(view)
                except TypeError:  # a protobuf implementation that takes bytes only
                    model.ParseFromString(bytes(view))
                return model, rawdata.read(view, model.graph.initializer, found)
    except (OSError, ValueError):
        return None, None


def _passed_stamp(path: Path) -> Path | None:
    """Where the disk cache records that the file at ``path``, as it is now (its size, modification and change
    times, inode and device), passed the installed onnx's checker and devicelayer's validation (as its source
    is now): a second process loading the same model does not check it again.  None when the file cannot be
    stat'ed."""
    from . import validate

    onnx = _onnx()
    try:
        st, own = path.stat(), Path(validate.__file__).stat()
        key = (f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}|"
               f"onnx {onnx.__version__}|validate {own.st_size} {own.st_mtime_ns}")
    except OSError:
        return None
    return diskcache.cache_dir() / "onnx-checked" / hashlib.sha256(key.encode()).hexdigest()


def _load_external_data(model: Any, folder: Path) -> bool:
    """Read the tensors a model file keeps in external files (beside it); GraphError naming the tensor and file
    where one is missing or too short.  Whether the model had any."""
    from onnx import TensorProto
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_tensor

    found = False
    for t in _get_all_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        found = True
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location")
        what = f"tensor {t.name!r}" if t.name else "a tensor"
        if not location:
            raise GraphError(f"{what} is stored externally but names no file")
        if not (folder / location).is_file():
            raise GraphError(f"{what} is stored in {location!r}, which is not a file beside the model ({folder})")
        try:
            load_external_data_for_tensor(t, str(folder))
        except Exception as exc:  # noqa: BLE001 - onnx raises several kinds for a bad location or a short file
            raise GraphError(f"{what}: its external data in {location!r} cannot be read: {type(exc).__name__}: "
                             f"{exc}") from None
        t.data_location = TensorProto.DEFAULT  # its bytes are in the model now: read once, not again per use
        del t.external_data[:]
    return found


def _loads_anyway(model: Any) -> bool:
    """Whether a model the checker refuses is still well formed enough to run (as onnxruntime runs it): every
    node input is produced by a node, an initializer or a graph input, in order, and the outputs exist."""
    known = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input} | {""}
    for node in model.graph.node:
        if any(n not in known for n in node.input):
            return False
        known.update(node.output)
    return all(o.name in known for o in model.graph.output)


def opset_of(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded, tensors as arrays)."""
    onnx = _onnx()
    out = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise UnsupportedOp(f"attribute {a.name!r} references a function attribute")
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = onnx.numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode() for s in v]
        out[a.name] = v
    return out


@dataclass
class Context:
    """State of one conversion, handed to the converters: the graph being built, the environment of ONNX
    names (a NumPy constant, a graph Value, a list for a sequence, None for an empty optional) and the node
    being converted."""

    graph: Graph
    opset: int
    opsets: dict[str, int]
    env: dict[str, Any] = field(default_factory=dict)
    ir_version: int = 8
    owner: Any = None  # the OnnxModel being converted (subgraphs of control-flow ops become models of their own)
    _materialized: dict[int, tuple[np.ndarray, Value]] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    node: Any = None
    node_name: str = ""

    # -- reading inputs --------------------------------------------------------------------------
    def has(self, i: int) -> bool:
        """Whether optional input ``i`` of the current node is given."""
        return i < len(self.node.input) and self.node.input[i] != ""

    def raw(self, i: int) -> Any:
        """Input ``i`` as it is in the environment (a Value, a NumPy constant, a list or None)."""
        return self.env[self.node.input[i]]

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i`` as a NumPy array when it is a constant (None when absent or computed at run time)."""
        if not self.has(i):
            return None
        x = self.raw(i)
        return x if isinstance(x, np.ndarray) else None

    def need_const(self, i: int, what: str) -> np.ndarray | None:
        """The contents of input ``i`` (absent: None).  A value computed at run time stops the walk here: the
        plan runs what comes before, reads the value and goes on with it known (a plan per value)."""
        if not self.has(i):
            return None
        x = self.raw(i)
        if isinstance(x, np.ndarray):
            return x
        if isinstance(x, Value):
            raise NeedValues([self.node.input[i]], what)
        raise UnsupportedOp(f"{what} (input {i}, {self.node.input[i]!r}) must be a tensor, got "
                            f"{'a sequence' if isinstance(x, list) else 'an empty optional'}")

    def on_host(self, fn: Callable[[list[np.ndarray]], list[np.ndarray]], inputs: Sequence[Any],
                what: str) -> list[np.ndarray]:
        """``fn`` (NumPy arrays in, a list of NumPy arrays out) applied on the host to the values of ``inputs``
        (environment entries of the current node's inputs): for ops whose output shape depends on the data
        (NonZero, Unique, Compress, NonMaxSuppression).  Now when every input is a constant; otherwise the
        plan splits here: what comes before runs, the inputs are read back, ``fn`` runs, and the rest of the
        plan is prepared for the shapes it gave."""
        if all(isinstance(x, np.ndarray) for x in inputs):
            return [np.asarray(r) for r in fn([np.asarray(x) for x in inputs])]
        names = []
        for x in inputs:
            name = next((n for n in self.node.input if n and self.env.get(n) is x), None)
            if name is None:
                raise UnsupportedOp(f"{what}: on_host takes the node's own inputs")
            names.append(name)
        raise NeedHost(fn, names, what)

    def value(self, i: int) -> Value:
        """Input ``i`` as a graph Value (constants become graph constants, once)."""
        return self.as_value(self.raw(i))

    def as_value(self, x: Value | np.ndarray) -> Value:
        """``x`` as a graph Value: a constant becomes a graph constant (once per array, its shape kept, 0-d
        included)."""
        if isinstance(x, Value):
            return x
        if not isinstance(x, np.ndarray):
            raise UnsupportedOp(f"expected a tensor, got {'a sequence' if isinstance(x, list) else type(x).__name__}")
        hit = self._materialized.get(id(x))
        if hit is not None:
            return hit[1]
        v = self.graph.constant(x if x.flags.c_contiguous else np.array(x, order="C"))
        self._materialized[id(x)] = (x, v)  # holding x keeps its id unique
        return v

    def values(self) -> list[Value]:
        return [self.value(i) for i in range(len(self.node.input)) if self.has(i)]

    # -- building ---------------------------------------------------------------------------------
    def name(self, suffix: str = "") -> str:
        """A fresh library node name derived from the ONNX node's name."""
        base = self.node_name + (f"/{suffix}" if suffix else "")
        name, k = base, 1
        while name in self._names or name in self.graph.values:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    def add(self, op: str, inputs: Sequence[Value | np.ndarray], suffix: str = "", **attrs: Any) -> list[Value]:
        ins = [self.as_value(x) for x in inputs]
        return self.graph.apply(op, ins, name=self.name(suffix), **attrs)

    def op(self, op: str, inputs: Sequence[Value | np.ndarray], suffix: str = "", **attrs: Any) -> Value:
        return self.add(op, inputs, suffix, **attrs)[0]

    # -- evaluating on the host --------------------------------------------------------------------
    def fold(self, node: Any) -> list[np.ndarray]:
        """Evaluate a node whose inputs are all constants (or a Shape/Size of a value, whose shape is known):
        a quick NumPy folder where there is one, else the op's converter and the NumPy references of the library
        ops it makes, else (an op devicelayer has no converter for) ONNX's reference evaluator."""
        from .converters import CONVERTERS, FOLDERS

        if node.op_type in ("Shape", "Size"):
            return [_shape_of(self.env[node.input[0]], node)]
        ins = [self.env[n] if n else None for n in node.input]
        quick = FOLDERS.get(node.op_type)
        if quick is not None:
            res = quick(self, attributes(node), ins)
            if res is not None:
                return [np.asarray(r) for r in res]  # (NumPy gives scalars for 0-d results)
        if node.op_type in CONVERTERS:
            return self._fold_by_converter(node, CONVERTERS[node.op_type])
        return _reference_eval(node, ins, self.opsets, self.ir_version)

    def _fold_by_converter(self, node: Any, conv: Any) -> list[Any]:
        """A node of constant inputs converted into library ops of a scratch graph, and those ops evaluated on the
        host by their NumPy references: the semantics devicelayer gives the op at run time."""
        from ..kernels.op import get

        g = Graph("fold")
        sub = Context(g, self.opset, self.opsets, {n: self.env[n] for n in node.input if n}, self.ir_version,
                      owner=self.owner)
        sub.node, sub.node_name = node, self.node_name
        outs = list(conv(sub, attributes(node)))
        known: dict[int, np.ndarray] = {id(v): v.constant for v in g.values.values() if v.constant is not None}
        for n in g.nodes:
            res = get(n.op).reference([known[id(v)] for v in n.inputs], n.attrs)
            for v, r in zip(n.outputs, res):
                known[id(v)] = np.asarray(r, dtype=v.dtype).reshape(v.shape)
        return [known[id(o)] if isinstance(o, Value) else o for o in outs]


Converter = Callable[[Context, dict[str, Any]], Sequence[Any]]


def _shape_of(x: Any, node: Any) -> np.ndarray:
    """Shape (with ONNX's start/end) or Size of a value or constant."""
    shape = np.array(x.shape, dtype=np.int64)
    if node.op_type == "Size":
        return np.array(int(np.prod(shape)), dtype=np.int64)
    a = attributes(node)
    r = len(shape)
    start, end = a.get("start", 0), a.get("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return shape[start:end]


def _reference_eval(node: Any, ins: list[Any], opsets: Mapping[str, int], ir_version: int) -> list[np.ndarray]:
    """One node evaluated by ONNX's reference evaluator on constant inputs."""
    onnx = _onnx()
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    outs = [f"out{i}" if n else "" for i, n in enumerate(node.output)]
    single = onnx.helper.make_node(node.op_type, names, outs, domain=node.domain)
    single.attribute.extend(node.attribute)
    feeds = {nm: x for nm, x in zip(names, ins) if nm}
    graph = onnx.helper.make_graph(
        [single], "fold",
        [onnx.helper.make_tensor_value_info(nm, onnx.helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for nm, x in feeds.items()],
        [onnx.helper.make_empty_tensor_value_info(o) for o in outs if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = ir_version
    results = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r) for r in results]


def input_dims(type_proto: Any) -> tuple[int | str | None, ...] | None:
    """The declared dimensions of a tensor TypeProto: an int where fixed (0 included), the ``dim_param`` name
    where symbolic, None where unnamed; None when it declares no shape."""
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def convert(model: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, fold: bool = True) -> Graph:
    """The Graph of a checked ModelProto for one signature of input shapes (``input_shapes`` for the
    symbolic dimensions; one not given is 1).  A model that needs run-time values to go on (a shape read from
    a tensor computed at run time, a branch chosen by data) has no single Graph: UnsupportedOp, naming the
    node; compile ``load(model)`` instead, which splits the plan there.  ``fold``: per-channel affine maps
    folded into the conv or batch normalization before them and ReLUs into convs
    (``devicelayer.graph.fold``), reshape-transpose-reshape channel shuffles made one ``channel_shuffle``
    (``devicelayer.graph.shuffle``)."""
    from .model import OnnxModel

    return OnnxModel(model, input_shapes, fold).graph()


def load(source: Any, input_shapes: Mapping[str, Sequence[int]] | None = None, fold: bool = True) -> Any:
    """Load an ONNX model (path, bytes or ModelProto) as an ``OnnxModel``: ``.compile(devices)`` gives a plan
    that serves every input shape the model allows, specialised (and cached) per signature of shapes.

    ``input_shapes`` fixes symbolic dimensions (``dim_param`` or unnamed) of the inputs it names; the plan then
    accepts only those shapes.  With ``fold`` (the default) a BatchNormalization, Mul or Add by per-channel
    constants right after a Conv or BatchNormalization is folded into its parameters (those nodes are then
    not in the graph), as inference runtimes do.  Unsupported ops raise UnsupportedOp naming the op type and
    the node; a malformed model raises GraphError.
    """
    from .model import OnnxModel

    model, raw = _read(source)
    return OnnxModel(model, input_shapes, fold, raw=raw)
