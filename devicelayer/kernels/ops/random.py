"""Seeded random generators: random_uniform, random_normal, bernoulli, multinomial.

Every draw is a pure function of the seed and the element's index: Threefry-2x32 with 20 rounds (Salmon et
al., "Parallel random numbers: as easy as 1, 2, 3"; the counter-based generator of Random123 and JAX), keyed by
the 64-bit ``seed`` and counting over (element index, stream).  Its 32-bit additions, rotations and xors are
written once in NumPy and once in the kernel dialect, so every device draws the integers the host draws, bit
for bit; the floats made from them differ at most by the rounding of ``log``/``cos``/``exp``.  A plan draws the
same numbers on every run (ONNX's generators are keyed by their ``seed`` attribute; the converter picks one at
load time where a model gives none).

Uniforms take the top 24 bits of a word (``k * 2**-24``, exact in float32) for float16 and float32 results and
53 bits of two words for float64; normals are Box-Muller of two uniforms (the cosine half).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...dtypes import arithmetic, computes_as_float, dtype as as_dtype
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, float_attr, groups_for, kernel_takes, local_1d, register
from ..render import lacks
from .binary import INT_MAX
from .movement import refuse_unknown

#: Threefry-2x32 rotation distances (Random123's R_32x2) and the key-schedule parity constant
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA
_ROUNDS = 20
_TWO_PI = 6.283185307179586


# -- the generator, in NumPy and in the dialect ----------------------------------------------------------------
def seed_key(seed: int) -> tuple[int, int, int]:
    """The three Threefry key words (k0, k1, parity) of a 64-bit seed."""
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    return k0, k1, _PARITY ^ k0 ^ k1


def threefry(seed: int, counter: np.ndarray, stream: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The two 32-bit words Threefry-2x32-20 draws for each ``counter`` (uint32 array) in ``stream``."""
    ks = seed_key(seed)
    x0 = counter.astype(np.uint32) + np.uint32(ks[0])
    x1 = np.full_like(x0, np.uint32(stream)) + np.uint32(ks[1])
    for r in range(_ROUNDS):
        bits = _ROTATIONS[r % 8]
        x0 += x1
        x1 = (x1 << np.uint32(bits)) | (x1 >> np.uint32(32 - bits))
        x1 ^= x0
        if r % 4 == 3:
            s = (r + 1) // 4
            x0 += np.uint32(ks[s % 3])
            x1 += np.uint32((ks[(s + 1) % 3] + s) & 0xFFFFFFFF)
    return x0, x1


def threefry_code(counter: str, stream: str, out: tuple[str, str] = ("x0", "x1"), indent: str = "        ") -> str:
    """Dialect code declaring the uints ``out``: Threefry-2x32-20 of (``counter``, ``stream``) keyed by the uint
    scalars ``k0``, ``k1``, ``k2`` (``seed_key``)."""
    ks = ("k0", "k1", "k2")
    a, b = out
    lines = [f"{indent}uint {a} = CAST(uint, {counter}) + k0;\n", f"{indent}uint {b} = CAST(uint, {stream}) + k1;\n"]
    for r in range(_ROUNDS):
        bits = _ROTATIONS[r % 8]
        lines.append(f"{indent}{a} += {b}; {b} = ({b} << {bits}u) | ({b} >> {32 - bits}u); {b} ^= {a};\n")
        if r % 4 == 3:
            s = (r + 1) // 4
            lines.append(f"{indent}{a} += {ks[s % 3]}; {b} += {ks[(s + 1) % 3]} + {s}u;\n")
    return "".join(lines)


_U24 = 2.0 ** -24
_U53 = 2.0 ** -53


def uniform_numpy(x0: np.ndarray, x1: np.ndarray, wide: bool) -> np.ndarray:
    """Uniforms in [0, 1) as float64 from the words: 24 bits of ``x0``, or 53 bits of both when ``wide``."""
    if wide:
        return ((x0 >> np.uint32(5)).astype(np.float64) * 67108864.0 + (x1 >> np.uint32(6))) * _U53
    return (x0 >> np.uint32(8)).astype(np.float64) * _U24


def uniform_code(wide: bool, w0: str = "x0", w1: str = "x1") -> str:
    """Dialect expression of the uniform ``uniform_numpy`` makes (an f64 when ``wide``, else a float)."""
    if wide:
        return (f"((CAST(f64, {w0} >> 5u) * CAST(f64, 67108864.0f) + CAST(f64, {w1} >> 6u)) "
                f"* CAST(f64, {_U53!r}f))")
    return f"(CAST(float, {w0} >> 8u) * {_U24!r}f)"


def _wide(dtype: np.dtype) -> bool:
    return np.dtype(dtype) == np.float64


def _acc(dtype: np.dtype) -> np.dtype:
    """The dtype draws are computed in for results of ``dtype`` (float32 for float16)."""
    return np.dtype(np.float64) if _wide(dtype) else np.dtype(np.float32)


# -- attribute helpers --------------------------------------------------------------------------------------------
def seed_attr(op: Op, attrs: dict[str, Any]) -> int:
    """The ``seed`` attribute: an int in [0, 2**64) (default 0)."""
    seed = attrs.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 64:
        raise op.error(f"attribute 'seed' must be an int in [0, 2**64), got {seed!r}")
    return int(seed)


def dtype_attr(op: Op, attrs: dict[str, Any], default: Any, kinds: str, what: str) -> np.dtype:
    """The ``dtype`` attribute as a NumPy dtype of one of ``kinds`` (``default`` when absent)."""
    value = attrs.get("dtype")
    if value is None:
        value = default
    try:
        dtype = as_dtype(value)
    except TypeError:
        raise op.error(f"attribute 'dtype' is not a dtype: {value!r}") from None
    if (dtype.kind not in kinds and not ("f" in kinds and computes_as_float(dtype)) or dtype.itemsize > 8
            or dtype.name == "longdouble"):
        raise op.error(f"attribute 'dtype' must be {what}, got {dtype}")
    return dtype


def _launch(spec: KernelSpec, buffers: tuple, n: int, seed: int, scalars: tuple, info: DeviceInfo) -> Launch:
    local = local_1d(info)
    return Launch(spec, (*buffers, n, *seed_key(seed), *scalars), groups_for(n, local, info), (local,))


def _seed_params() -> tuple[Param, ...]:
    return (Param("n", "int", "scalar"), Param("k0", "uint", "scalar"), Param("k1", "uint", "scalar"),
            Param("k2", "uint", "scalar"))


class _Generator(Op):
    """Base of the generators: output dtype and device checks."""

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        out = self.infer(inputs, attrs)[0]
        for t in [*inputs, out]:
            if t.dtype.name not in info.dtypes:
                return f"{info.id} has no {t.dtype.name}"
        if info.kernel_language == "python":
            return None
        if self.reads_input and not kernel_takes(self.kernel_dtypes, inputs[0].dtype.name, info):
            return f"{self.name} has no {info.kernel_language} kernel for {inputs[0].dtype}"
        if out.size > INT_MAX:
            return f"{self.name}: {out.size} elements exceed the kernels' int32 indexing"
        return lacks(self.math, info.kernel_language, dialect_type(self.math_dtype(inputs, attrs)))

    #: whether the kernel reads input 0 (bernoulli and multinomial do; the shape-only input of the others not)
    reads_input = True
    #: dialect math the kernel calls (render.lacks decides where it can run)
    math = ""

    def math_dtype(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> np.dtype:
        """The dtype the kernel computes in."""
        return attrs["dtype"]


# -- random_uniform / random_normal ----------------------------------------------------------------------------
class _Distribution(_Generator):
    """y of ``shape`` (or of the shape of the optional input, whose values are not read) and ``dtype``."""

    min_inputs = 0
    max_inputs = 1
    reads_input = False
    #: the distribution's two float attributes with their defaults
    params: tuple[tuple[str, float], tuple[str, float]]

    def check(self, inputs, attrs):
        names = [n for n, _ in self.params]
        refuse_unknown(self, attrs, [*names, "dtype", "shape", "seed"])
        out = {n: float_attr(self, attrs, n, d) for n, d in self.params}
        out["seed"] = seed_attr(self, attrs)
        out["dtype"] = dtype_attr(self, attrs, inputs[0].dtype if inputs and inputs[0].dtype.kind == "f"
                                  else np.float32, "f", "float16, float32 or float64")
        if inputs:
            shape = attrs.get("shape")
            if shape is not None and tuple(shape) != inputs[0].shape:
                raise self.error(f"takes its shape from the input {inputs[0].shape} or from the 'shape' attribute, "
                                 f"not both (got shape={shape!r})")
            out["shape"] = inputs[0].shape
        else:
            shape = attrs.get("shape")
            if isinstance(shape, np.ndarray):
                shape = shape.tolist()
            if not isinstance(shape, (list, tuple)) or not all(
                    isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in shape):
                raise self.error(f"needs a 'shape' attribute of non-negative ints (or an input), got {shape!r}")
            out["shape"] = tuple(int(s) for s in shape)
        return out

    def infer(self, inputs, attrs):
        return [TensorType(attrs["shape"], attrs["dtype"])]

    def draw(self, x0: np.ndarray, x1: np.ndarray, seed: int, index: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """The standard draws (float64) from stream-0 words; subclasses may draw more streams."""
        raise NotImplementedError

    def reference(self, inputs, attrs):
        dtype = attrs["dtype"]
        n = int(np.prod(attrs["shape"], dtype=np.int64))
        index = np.arange(n, dtype=np.uint32)
        x0, x1 = threefry(attrs["seed"], index)
        acc = _acc(dtype)
        a, b = (acc.type(attrs[name]) for name, _ in self.params)
        with np.errstate(all="ignore"):
            y = self.finish(self.draw(x0, x1, attrs["seed"], index, dtype).astype(acc), a, b)
        return [y.astype(dtype).reshape(attrs["shape"])]

    @staticmethod
    def finish(v: np.ndarray, a: Any, b: Any) -> np.ndarray:
        """The result from the standard draw ``v`` and the two parameters."""
        raise NotImplementedError

    #: dialect code computing ``ACC v`` (the standard draw) after ``threefry_code`` of stream 0
    def draw_code(self, wide: bool) -> str:
        raise NotImplementedError

    #: dialect expression of the result from ``v`` and the float scalars ``a``, ``b``
    finish_code = ""

    def math_dtype(self, inputs, attrs):
        return attrs["dtype"]

    def plan(self, inputs, outputs, attrs, info):
        dtype = attrs["dtype"]
        elem = dialect_type(dtype)
        wide = _wide(dtype)
        body = ("    FOR_EACH(i, n) {\n" + threefry_code("i", "0") + self.draw_code(wide)
                + f"        y[i] = FROM_ACC({self.finish_code});\n    }}")
        spec = KernelSpec(f"{self.name}_{elem}", (Param("y", "T", "out"), *_seed_params(),
                                                  Param("a", "float", "scalar"), Param("b", "float", "scalar")),
                          body, elem=elem)
        a, b = (float(attrs[name]) for name, _ in self.params)
        return Plan([_launch(spec, (("out", 0),), outputs[0].size, attrs["seed"], (a, b), info)])


@register
class RandomUniform(_Distribution):
    """random_uniform([like], shape=, low=0, high=1, dtype=float32, seed=0): uniform draws in [low, high)."""

    name = "random_uniform"
    params = (("low", 0.0), ("high", 1.0))

    def draw(self, x0, x1, seed, index, dtype):
        return uniform_numpy(x0, x1, _wide(dtype))

    @staticmethod
    def finish(v, a, b):
        return a + (b - a) * v

    def draw_code(self, wide):
        return f"        ACC v = CAST(ACC, {uniform_code(wide)});\n"

    finish_code = "CAST(ACC, a) + (CAST(ACC, b) - CAST(ACC, a)) * v"


@register
class RandomNormal(_Distribution):
    """random_normal([like], shape=, mean=0, scale=1, dtype=float32, seed=0): normal draws (Box-Muller)."""

    name = "random_normal"
    params = (("mean", 0.0), ("scale", 1.0))
    math = "dl_log(dl_cos("

    def draw(self, x0, x1, seed, index, dtype):
        wide = _wide(dtype)
        if wide:  # two 53-bit uniforms: stream 1 gives the second pair of words
            u1 = 1.0 - uniform_numpy(x0, x1, True)
            u2 = uniform_numpy(*threefry(seed, index, 1), True)
        else:
            u1 = 1.0 - uniform_numpy(x0, x1, False)
            u2 = uniform_numpy(x1, x0, False)
        acc = _acc(dtype).type
        u1, u2 = u1.astype(acc), u2.astype(acc)
        return np.sqrt(np.maximum(acc(-2) * np.log(u1), acc(0))) * np.cos(acc(_TWO_PI) * u2)

    @staticmethod
    def finish(v, a, b):
        return a + b * v

    def draw_code(self, wide):
        if wide:  # the second uniform from the words of stream 1
            second = threefry_code("i", "1", ("z0", "z1")) + f"        ACC u2 = {uniform_code(True, 'z0', 'z1')};\n"
        else:
            second = f"        ACC u2 = CAST(ACC, {uniform_code(False, 'x1')});\n"
        return (f"        ACC u1 = CAST(ACC, 1.0f) - CAST(ACC, {uniform_code(wide)});\n" + second
                + "        ACC v = dl_sqrt(dl_max(CAST(ACC, -2.0f) * dl_log(u1), CAST(ACC, 0.0f))) * "
                f"dl_cos(CAST(ACC, {_TWO_PI!r}{'' if wide else 'f'}) * u2);\n")

    finish_code = "CAST(ACC, a) + CAST(ACC, b) * v"


# -- bernoulli / multinomial ----------------------------------------------------------------------------------
@register
class Bernoulli(_Generator):
    """bernoulli(p, dtype=p's dtype, seed=0): 1 where a uniform draw is below p, else 0 (ONNX Bernoulli)."""

    name = "bernoulli"
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["dtype", "seed"])
        p = inputs[0]
        if not computes_as_float(p.dtype):
            raise self.error(f"needs floating-point probabilities, got {p.dtype}")
        return {"dtype": dtype_attr(self, attrs, p.dtype, "biuf", "a number or bool type"),
                "seed": seed_attr(self, attrs)}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["dtype"])]

    def math_dtype(self, inputs, attrs):
        return inputs[0].dtype

    def reference(self, inputs, attrs):
        p = inputs[0]
        x0, x1 = threefry(attrs["seed"], np.arange(p.size, dtype=np.uint32))
        u = uniform_numpy(x0, x1, _wide(p.dtype)).reshape(p.shape)
        return [(u < p.astype(np.float64)).astype(attrs["dtype"])]

    def plan(self, inputs, outputs, attrs, info):
        p, out = inputs[0], outputs[0]
        elem, wide = dialect_type(p.dtype), _wide(p.dtype)
        to = "uchar" if out.dtype.kind == "b" else dialect_type(out.dtype)
        body = ("    FOR_EACH(i, n) {\n" + threefry_code("i", "0")
                + f"        float bit = CAST(ACC, {uniform_code(wide)}) < TO_ACC(p[i]) ? 1.0f : 0.0f;\n"
                f"        y[i] = CAST({to}, bit);\n    }}")
        spec = KernelSpec(f"bernoulli_{elem}_{to}", (Param("p", "T", "in"), Param("y", to, "out"), *_seed_params()),
                          body, elem=elem)
        return Plan([_launch(spec, (("in", 0), ("out", 0)), out.size, attrs["seed"], (), info)])


@register
class Multinomial(_Generator):
    """multinomial(logits, sample_size=1, dtype=int32, seed=0): ``sample_size`` class indices per row of
    ``logits`` (batch, classes), drawn with probabilities softmax(logits) (ONNX Multinomial)."""

    name = "multinomial"
    kernel_dtypes = frozenset({"float32", "float16", "float64"})
    math = "dl_exp("

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["dtype", "sample_size", "seed"])
        x = inputs[0]
        if not computes_as_float(x.dtype):
            raise self.error(f"needs floating-point log-probabilities, got {x.dtype}")
        if len(x.shape) != 2 or x.shape[1] < 1:
            raise self.error(f"needs logits of shape (batch, classes) with classes >= 1, got {x.shape}")
        size = attrs.get("sample_size", 1)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise self.error(f"attribute 'sample_size' must be a positive int, got {size!r}")
        dtype = dtype_attr(self, attrs, np.int32, "i", "int32 or int64")
        if dtype.itemsize < 4:
            raise self.error(f"attribute 'dtype' must be int32 or int64, got {dtype}")
        return {"dtype": dtype, "sample_size": int(size), "seed": seed_attr(self, attrs)}

    def infer(self, inputs, attrs):
        return [TensorType((inputs[0].shape[0], attrs["sample_size"]), attrs["dtype"])]

    def math_dtype(self, inputs, attrs):
        return inputs[0].dtype

    def reference(self, inputs, attrs):
        x = inputs[0]
        wide = x.astype(arithmetic(x.dtype), copy=False)
        batch, classes = x.shape
        size = attrs["sample_size"]
        x0, x1 = threefry(attrs["seed"], np.arange(batch * size, dtype=np.uint32))
        u = uniform_numpy(x0, x1, _wide(x.dtype)).astype(wide.dtype).reshape(batch, size)
        with np.errstate(all="ignore"):
            cdf = np.cumsum(np.exp(wide - wide.max(axis=1, keepdims=True)), axis=1)
            target = u * cdf[:, -1:]
        out = np.empty((batch, size), attrs["dtype"])
        rows = max(1, (1 << 22) // max(1, size * classes))  # compare in blocks of rows: bounded memory
        for r in range(0, batch, rows):
            below = cdf[r:r + rows, None, :] <= target[r:r + rows, :, None]
            out[r:r + rows] = np.minimum(below.sum(axis=2), classes - 1)
        return [out]

    def plan(self, inputs, outputs, attrs, info):
        x, out = inputs[0], outputs[0]
        elem, wide = dialect_type(x.dtype), _wide(x.dtype)
        to = dialect_type(out.dtype)
        body = ("    FOR_EACH(i, n) {\n        int row = (i / S) * C;\n" + threefry_code("i", "0")
                + "        ACC m = TO_ACC(x[row]);\n"
                "        for (int c = 1; c < C; c++) m = dl_max(m, TO_ACC(x[row + c]));\n"
                "        ACC total = CAST(ACC, 0.0f);\n"
                "        for (int c = 0; c < C; c++) total += dl_exp(TO_ACC(x[row + c]) - m);\n"
                f"        ACC target = CAST(ACC, {uniform_code(wide)}) * total;\n"
                "        ACC acc = CAST(ACC, 0.0f);\n        int k = C - 1;\n"
                "        for (int c = 0; c < C; c++) {\n"
                "            acc += dl_exp(TO_ACC(x[row + c]) - m);\n"
                "            if (acc > target) { k = c; break; }\n        }\n"
                f"        y[i] = CAST({to}, k);\n    }}")
        spec = KernelSpec(f"multinomial_{elem}_{to}", (Param("x", "T", "in"), Param("y", to, "out"), *_seed_params(),
                                                       Param("S", "int", "scalar"), Param("C", "int", "scalar")),
                          body, elem=elem)
        return Plan([_launch(spec, (("in", 0), ("out", 0)), out.size, attrs["seed"],
                             (attrs["sample_size"], x.shape[1]), info)])
