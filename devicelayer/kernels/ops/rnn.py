"""Recurrent layers with ONNX semantics: rnn, gru, lstm.

Inputs, in ONNX order: X, W, R and the optional B, sequence_lens, initial_h (lstm: initial_c, P); trailing
ones may be left out, and the ONNX converter fills a gap with zeros (or full lengths).  Every direction
(forward, reverse, bidirectional), ``layout`` 0 (time first) and 1 (batch first), ``clip``, the activation
functions with their alpha/beta, gru's ``linear_before_reset`` and lstm's peepholes and ``input_forget``.
Sequences shorter than the tensor (``sequence_lens``) run the reverse direction from their own last step; Y is
0 past a sequence's end and Y_h/Y_c hold its last state (0 for an empty sequence), as in ONNX Runtime.

On a device one op is a handful of launches recorded together: R transposed once (so the work items of a
step read it coalesced), one GEMM for the input projections of every step and direction (X @ W^T), then per
time step one fused kernel (two for gru without ``linear_before_reset``) in which each work item owns one
hidden unit of one batch row and direction: it takes the recurrent dot products against the previous hidden
state, applies the gates and writes h (and c) to ping-pong state buffers and to Y.  Kernels take every size
as a scalar, so a compiled kernel serves every sequence length and batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...dtypes import arithmetic, computes_as_float
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, float_attr, groups_for, local_1d, register
from ..render import lacks
from .binary import INT_MAX
from .matmul import gemm_steps
from .movement import contiguous_strides, copy_launch, refuse_unknown


# -- activation functions -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Activation:
    """One of ONNX's recurrent activation functions: NumPy and dialect forms of f(x; alpha, beta)."""

    numpy: Callable[[np.ndarray, Any, Any], np.ndarray]
    code: Callable[[str, str, str], str]  # (variable, alpha literal, beta literal) -> dialect expression
    alpha: float | None = None  # default alpha; None: the function takes no alpha
    beta: float | None = None


def _sigmoid(x, a, b):
    return 1 / (1 + np.exp(-x))


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(lambda x, a, b: np.maximum(x, 0), lambda v, a, b: f"dl_max({v}, CAST(ACC, 0.0f))"),
    "tanh": Activation(lambda x, a, b: np.tanh(x), lambda v, a, b: f"dl_tanh({v})"),
    "sigmoid": Activation(_sigmoid, lambda v, a, b: f"(CAST(ACC, 1.0f) / (CAST(ACC, 1.0f) + dl_exp(-{v})))"),
    "affine": Activation(lambda x, a, b: a * x + b, lambda v, a, b: f"({a} * {v} + {b})", 1.0, 0.0),
    "leakyrelu": Activation(lambda x, a, b: np.where(x >= 0, x, a * x),
                            lambda v, a, b: f"({v} >= CAST(ACC, 0.0f) ? {v} : {a} * {v})", 0.01),
    "thresholdedrelu": Activation(lambda x, a, b: np.where(x > a, x, 0),
                                  lambda v, a, b: f"({v} > {a} ? {v} : CAST(ACC, 0.0f))", 1.0),
    "scaledtanh": Activation(lambda x, a, b: a * np.tanh(b * x), lambda v, a, b: f"({a} * dl_tanh({b} * {v}))",
                             1.0, 1.0),
    "hardsigmoid": Activation(lambda x, a, b: np.clip(a * x + b, 0, 1),
                              lambda v, a, b: f"dl_max(CAST(ACC, 0.0f), dl_min(CAST(ACC, 1.0f), {a} * {v} + {b}))",
                              0.2, 0.5),
    "elu": Activation(lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)),
                      lambda v, a, b: f"({v} >= CAST(ACC, 0.0f) ? {v} : {a} * (dl_exp({v}) - CAST(ACC, 1.0f)))", 1.0),
    "softsign": Activation(lambda x, a, b: x / (1 + np.abs(x)),
                           lambda v, a, b: f"({v} / (CAST(ACC, 1.0f) + dl_abs({v})))"),
    "softplus": Activation(lambda x, a, b: np.logaddexp(0, x),
                           lambda v, a, b: f"({v} > CAST(ACC, 20.0f) ? {v} : dl_log(CAST(ACC, 1.0f) + dl_exp({v})))"),
}

#: one activation slot: (name, alpha, beta)
Slot = tuple[str, float, float]


def _literal(value: float) -> str:
    return f"CAST(ACC, {float(value)!r}f)"


def activation_code(slot: Slot, v: str) -> str:
    """Dialect expression of activation ``slot`` applied to the ACC variable ``v``."""
    name, a, b = slot
    return ACTIVATIONS[name].code(v, _literal(a), _literal(b))



#: products of fewer multiply-adds run NumPy's own loops (einsum), not BLAS: waking OpenBLAS's threads for a
#: product this small costs more than the product, and they spin on the cores for a long while afterwards
#: (where oneDNN's team runs the model's convolutions)
_SMALL_RECUR = 1 << 21
#: ... but below this many BLAS runs them on the calling thread (OpenBLAS threads a product from 9216 elements of
#: the matrix-vector form, 262144 multiply-adds of the matrix form), and its call costs half einsum's
_TINY_RECUR = 1 << 13


def _recur(h: np.ndarray, rt: np.ndarray) -> np.ndarray:
    """h (dirs, B, H) @ rt (dirs, H, N) per direction (the input and recurrent products of a step or a run)."""
    size = h.shape[1] * h.shape[2] * rt.shape[2]
    if _TINY_RECUR <= size < _SMALL_RECUR:
        return np.einsum("dbh,dhn->dbn", h, rt)
    return np.matmul(h, rt)


# -- the op family ----------------------------------------------------------------------------------------------------
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


class Recurrent(Op):
    """Shared checks, reference loop and device plan of rnn, gru and lstm (``cell_*`` give a layer its math)."""

    min_inputs = 3
    kernel_dtypes = frozenset({"float32", "float16", "float64"})
    #: gates stacked in W and R (rows of G * hidden_size)
    gates: int = 1
    #: activation slots per direction and their defaults
    default_activations: tuple[str, ...] = ("tanh",)
    #: the optional inputs after X, W, R, in ONNX order
    optional: tuple[str, ...] = ("B", "sequence_lens", "initial_h")
    #: attributes besides the shared ones
    extra_attrs: tuple[str, ...] = ()

    # -- checking ---------------------------------------------------------------------------------------------------
    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unknown(self, attrs, ["direction", "hidden_size", "layout", "clip", "activations",
                                     "activation_alpha", "activation_beta", *self.extra_attrs])
        direction = attrs.get("direction", "forward")
        if isinstance(direction, bytes):
            direction = direction.decode(errors="replace")
        if direction not in _DIRECTIONS:
            raise self.error(f"direction must be forward, reverse or bidirectional, got {direction!r}")
        dirs = _DIRECTIONS[direction]
        layout = self._flag(attrs, "layout")
        X, R = inputs[0], inputs[2]
        dtype = X.dtype
        if not computes_as_float(dtype):  # (bfloat16 computes in float32)
            raise self.error(f"needs floating-point inputs, got X of {dtype}")
        if len(X.shape) != 3:
            raise self.error(f"X must be 3-D ({'batch, seq' if layout else 'seq, batch'}, input), got {X.shape}")
        T, B = (X.shape[1], X.shape[0]) if layout else X.shape[:2]
        if T < 1:
            raise self.error(f"X has an empty sequence axis: {X.shape}")
        if len(R.shape) != 3 or R.shape[0] != dirs or R.shape[1] != self.gates * R.shape[2]:
            raise self.error(f"R must be ({dirs}, {self.gates} * hidden_size, hidden_size), got {R.shape}")
        H = R.shape[2]
        if H < 1:
            raise self.error("hidden_size must be at least 1")
        hidden = attrs.get("hidden_size")
        if hidden is not None and (isinstance(hidden, bool) or not isinstance(hidden, (int, np.integer))
                                   or int(hidden) != H):
            raise self.error(f"attribute hidden_size={hidden!r} disagrees with R of shape {R.shape}")
        want = {"W": (dirs, self.gates * H, X.shape[2]), "B": (dirs, 2 * self.gates * H), "sequence_lens": (B,),
                "initial_h": (B, dirs, H) if layout else (dirs, B, H), "initial_c": (B, dirs, H) if layout
                else (dirs, B, H), "P": (dirs, 3 * H)}
        for name, t in zip(("W", *self.optional), inputs[1:2] + list(inputs[3:])):
            if t.shape != want[name]:
                raise self.error(f"{name} must have shape {want[name]}, got {t.shape}")
            if name == "sequence_lens":
                if t.dtype != np.int32:
                    raise self.error(f"sequence_lens must be int32, got {t.dtype}")
            elif t.dtype != dtype:
                raise self.error(f"{name} is {t.dtype}; X is {dtype} (every float input must share one dtype)")
        if R.dtype != dtype:
            raise self.error(f"R is {R.dtype}; X is {dtype} (every float input must share one dtype)")
        clip = attrs.get("clip")
        if clip is not None:
            clip = float_attr(self, attrs, "clip", 0.0)
            if clip <= 0:
                raise self.error(f"attribute clip must be positive, got {clip}")
        out = {"direction": direction, "hidden_size": H, "layout": layout, "clip": clip,
               "activations": self._activations(attrs, dirs)}
        out.update(self.check_extra(attrs))
        return out

    def _flag(self, attrs: dict[str, Any], name: str) -> int:
        value = attrs.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in (0, 1):
            raise self.error(f"attribute {name} must be 0 or 1, got {value!r}")
        return int(value)

    def check_extra(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The layer's own attributes, checked."""
        return {}

    def _activations(self, attrs: dict[str, Any], dirs: int) -> tuple[Slot, ...]:
        """(name, alpha, beta) for each activation slot of each direction; alphas and betas are consumed in order
        by the functions that take them (as ONNX Runtime reads them), defaults those of the ONNX operators."""
        per = len(self.default_activations)
        names = attrs.get("activations")
        if names is None:
            names = list(self.default_activations) * dirs
        if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
            raise self.error(f"attribute activations must be a list of names, got {names!r}")
        if names and all(isinstance(n, tuple) for n in names):  # checked already: (name, alpha, beta) slots
            if len(names) != per * dirs or not all(len(n) == 3 and n[0] in ACTIVATIONS for n in names):
                raise self.error(f"attribute activations must be {per * dirs} (name, alpha, beta) slots, "
                                 f"got {names!r}")
            return tuple((n, float(a), float(b)) for n, a, b in names)
        names = [n.decode(errors="replace") if isinstance(n, bytes) else n for n in names]
        if len(names) == per and dirs == 2:
            names = names * 2
        if len(names) != per * dirs:
            raise self.error(f"attribute activations needs {per * dirs} names ({per} per direction), got {names}")
        alphas = self._floats(attrs, "activation_alpha")
        betas = self._floats(attrs, "activation_beta")
        slots = []
        for name in names:
            key = name.lower() if isinstance(name, str) else name
            if key not in ACTIVATIONS:
                raise self.error(f"unknown activation {name!r}; it takes {sorted(ACTIVATIONS)}")
            act = ACTIVATIONS[key]
            a = (alphas.pop(0) if alphas else act.alpha) if act.alpha is not None else 0.0
            b = (betas.pop(0) if betas else act.beta) if act.beta is not None else 0.0
            slots.append((key, float(a), float(b)))
        return tuple(slots)

    def _floats(self, attrs: dict[str, Any], name: str) -> list[float]:
        values = attrs.get(name)
        if values is None:
            return []
        if isinstance(values, (int, float, np.integer, np.floating)):
            values = [values]
        if not isinstance(values, (list, tuple, np.ndarray)):
            raise self.error(f"attribute {name} must be a list of numbers, got {values!r}")
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(float(v)):
                raise self.error(f"attribute {name} must hold finite numbers, got {values!r}")
            out.append(float(v))
        return out

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        X = inputs[0]
        dirs, H = _DIRECTIONS[attrs["direction"]], attrs["hidden_size"]
        if attrs["layout"]:
            B, T = X.shape[:2]
            y, state = (B, T, dirs, H), (B, dirs, H)
        else:
            T, B = X.shape[:2]
            y, state = (T, dirs, B, H), (dirs, B, H)
        return [TensorType(y, X.dtype)] + [TensorType(state, X.dtype)] * (self.states + 1)

    #: state tensors besides h (lstm: 1, its cell)
    states = 0

    def given(self, inputs: Sequence[Any]) -> dict[str, Any]:
        """The optional inputs present, by ONNX name."""
        return {name: x for name, x in zip(self.optional, inputs[3:])}

    # -- NumPy reference ----------------------------------------------------------------------------------------------
    def reference(self, inputs, attrs):
        X, W, R = inputs[:3]
        opt = self.given(inputs)
        dtype = X.dtype
        acc = arithmetic(dtype)
        layout, H, G = attrs["layout"], attrs["hidden_size"], self.gates
        x = (np.swapaxes(X, 0, 1) if layout else X).astype(acc)
        T, B = x.shape[:2]
        dirs = W.shape[0]
        lens = (np.clip(opt["sequence_lens"].astype(np.int64), 0, T) if "sequence_lens" in opt
                else np.full(B, T, np.int64))
        full = bool(np.all(lens == T))
        state = []
        for name in ("initial_h", "initial_c")[:self.states + 1]:
            v = opt.get(name)
            state.append(np.zeros((dirs, B, H), acc) if v is None else
                         (np.swapaxes(v, 0, 1) if layout else v).astype(acc))
        # every direction at once: xw (dirs, T, B, G * H), R^T (dirs, H, G * H), biases (dirs, 1, 2 * G * H)
        xw = _recur(np.broadcast_to(x.reshape(1, T * B, -1), (dirs, T * B, x.shape[-1])),
                    W.astype(acc).transpose(0, 2, 1)).reshape(dirs, T, B, G * H)
        rt = R.astype(acc).transpose(0, 2, 1)
        bias = opt["B"].astype(acc)[:, None, :] if "B" in opt else np.zeros((dirs, 1, 2 * G * H), acc)
        peep = opt["P"].astype(acc)[:, None, :] if "P" in opt else None
        reverse = np.array([d == 1 or attrs["direction"] == "reverse" for d in range(dirs)])[:, None]
        d_index, b_index = np.arange(dirs)[:, None], np.arange(B)[None, :]
        act = self._activation_numpy(attrs, dirs, acc)
        xw, bias = self.fold_bias(xw, bias)
        Y = np.zeros((T, dirs, B, H), acc)
        with np.errstate(all="ignore"):
            if full:  # every sequence whole: each direction's steps in the order it takes them, plain slices
                steps = np.stack([xw[d, ::-1] if reverse[d, 0] else xw[d] for d in range(dirs)], axis=1)
                for s in range(T):
                    state = self.cell_numpy(steps[s], state, rt, bias, peep, act, attrs)
                    Y[s] = state[0]
                for d in range(dirs):
                    if reverse[d, 0]:
                        Y[:, d] = Y[::-1, d].copy()
            for s in range(0 if full else int(lens.max(initial=0))):
                t = np.clip(np.where(reverse, lens[None, :] - 1 - s, s), 0, T - 1)  # (dirs, B)
                new = self.cell_numpy(xw[d_index, t, b_index], state, rt, bias, peep, act, attrs)
                active = np.broadcast_to(s < lens, (dirs, B))
                state = [np.where(active[..., None], n, o) for n, o in zip(new, state)]
                Y[t[active], np.broadcast_to(d_index, (dirs, B))[active], np.broadcast_to(b_index, (dirs, B))[
                    active]] = new[0][active]
        finals = [np.where((lens == 0)[None, :, None], 0, v) for v in state]
        if layout:
            Y = np.transpose(Y, (2, 0, 1, 3))
            finals = [np.swapaxes(f, 0, 1) for f in finals]
        return [np.ascontiguousarray(a).astype(dtype) for a in (Y, *finals)]

    def _activation_numpy(self, attrs: dict[str, Any], dirs: int,
                          dtype: np.dtype) -> Callable[[int, np.ndarray], np.ndarray]:
        """``act(slot, x)``: activation ``slot`` applied to x (dirs, B, ...) with each direction's function."""
        per = len(self.default_activations)
        slots = attrs["activations"]
        same = dirs == 1 or all(slots[k] == slots[per + k] for k in range(per))

        def one(slot: Slot) -> Callable[[np.ndarray], np.ndarray]:
            fn, a, b = ACTIVATIONS[slot[0]].numpy, dtype.type(slot[1]), dtype.type(slot[2])
            return lambda x: fn(x, a, b).astype(dtype, copy=False)  # (called under the caller's errstate)
        fns = [one(slot) for slot in slots]

        def act(slot: int, x: np.ndarray) -> np.ndarray:
            if same:
                return fns[slot](x)
            return np.stack([fns[d * per + slot](x[d]) for d in range(dirs)])
        return act

    #: the cell adds both biases whole at every step (rnn, lstm), so they are added to the projections once
    folds_bias = True

    def fold_bias(self, xw: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The input projections with the biases added once where the cell adds them whole (``folds_bias``), and
        the biases left for the cell (None when folded)."""
        if not self.folds_bias:
            return xw, bias
        gh = bias.shape[-1] // 2
        return xw + (bias[..., :gh] + bias[..., gh:])[:, None], None

    def cell_numpy(self, xw: np.ndarray, state: list[np.ndarray], rt: np.ndarray, bias: np.ndarray,
                   peep: np.ndarray | None, act: Callable[[int, np.ndarray], np.ndarray],
                   attrs: dict[str, Any]) -> list[np.ndarray]:
        """One step of every direction: xw (dirs, B, G * H) = X_t W^T, state [h (dirs, B, H), ...], rt = R^T
        (dirs, H, G * H), bias (dirs, 1, 2 * G * H), peep (dirs, 1, 3 * H) -> the new state."""
        raise NotImplementedError

    @staticmethod
    def clip_numpy(x: np.ndarray, clip: float | None) -> np.ndarray:
        return x if clip is None else np.clip(x, -clip, clip)

    # -- device plan ------------------------------------------------------------------------------------------------
    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is not None or info.kernel_language == "python":
            return why
        X, W = inputs[0], inputs[1]
        for t in [*inputs, *self.infer(inputs, attrs)]:
            if t.size > INT_MAX:
                return f"{self.name}: {t.size} elements exceed the kernels' int32 indexing"
        T, B = X.shape[:2]
        if T * B * W.shape[1] * W.shape[0] > INT_MAX:
            return f"{self.name}: the input projections exceed the kernels' int32 indexing"
        elem = dialect_type(X.dtype)
        return lacks("".join(s.body for s in self._specs(inputs, attrs)), info.kernel_language, elem)

    def sizes(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        """What the kernels are built from: sizes, element and state types, the optional inputs given, layout."""
        X, W = inputs[0], inputs[1]
        dirs, H = W.shape[0], attrs["hidden_size"]
        T, B = (X.shape[1], X.shape[0]) if attrs["layout"] else X.shape[:2]
        return {"dirs": dirs, "H": H, "T": T, "B": B, "I": X.shape[2], "GH": self.gates * H, "n": dirs * B * H,
                "layout": attrs["layout"], "elem": dialect_type(X.dtype),
                "state": "f64" if X.dtype == np.float64 else "float",
                "given": [name for name, _ in zip(self.optional, inputs[3:])],
                "rev0": int(attrs["direction"] == "reverse")}

    def _specs(self, inputs, attrs) -> list[KernelSpec]:
        sz = self.sizes(inputs, attrs)
        return [self._init_spec(sz, attrs)] + self.step_specs(sz, attrs)

    def _init_spec(self, sz: dict[str, Any], attrs: dict[str, Any]) -> KernelSpec:
        """Start states: h (and c) from initial_h (initial_c) or 0."""
        given, layout = sz["given"], attrs["layout"]
        params = [Param(n, "T", "in") for n in ("initial_h", "initial_c") if n in given]
        params += [Param("h", sz["state"], "out")] + ([Param("c", sz["state"], "out")] if self.states else [])
        params += [Param(n, "int", "scalar") for n in ("n", "NB", "H", "dirs")]
        index = "((i / H) % NB * dirs + (i / H) / NB) * H + i % H" if layout else "i"
        body = ["    FOR_EACH(i, n) {\n"]
        for src, dst in (("initial_h", "h"), ("initial_c", "c"))[:self.states + 1]:
            value = f"TO_ACC({src}[{index}])" if src in given else "CAST(ACC, 0.0f)"
            body.append(f"        {dst}[i] = {value};\n")
        body.append("    }")
        flags = "".join("1" if n in given else "0" for n in ("initial_h", "initial_c"))
        name = f"{self.name}_init_{sz['elem']}_l{layout}_{flags}"
        return KernelSpec(name, tuple(params), "".join(body), elem=sz["elem"])

    def step_specs(self, sz: dict[str, Any], attrs: dict[str, Any]) -> list[KernelSpec]:
        """The per-time-step kernels, launched in order each step."""
        raise NotImplementedError

    def step_args(self, sz: dict[str, Any], attrs: dict[str, Any], phase: int, s: int) -> list[Any]:
        """Buffers of the step kernel ``phase`` at step ``s`` (inputs, outputs, temps), in its parameter order."""
        raise NotImplementedError

    def plan(self, inputs, outputs, attrs, info):
        sz = self.sizes(inputs, attrs)
        dirs, H, T, B, I, GH, n = (sz[x] for x in ("dirs", "H", "T", "B", "I", "GH", "n"))
        state_dtype = np.dtype(np.float64 if sz["state"] == "f64" else np.float32)
        temps = [TensorType((dirs, H, GH), inputs[0].dtype), TensorType((dirs, T * B, GH), inputs[0].dtype),
                 TensorType((n,), state_dtype), TensorType((n,), state_dtype)]
        temps += [TensorType((n,), state_dtype)] * self.extra_temps(attrs)
        steps: list[Any] = []
        # R (dirs, GH, H) -> rt (dirs, H, GH)
        copy = copy_launch(inputs[2].dtype, ("in", 2), ("tmp", 0), (dirs, H, GH), (GH * H, 1, H), 0,
                           contiguous_strides((dirs, H, GH)), 0, info, self.name)
        steps.append(copy)
        # X W^T for every step and direction: xw (dirs, T * B, GH), rows in X's order
        steps += gemm_steps(info, sz["elem"], T * B, GH, I, I, 1, 1, I, [(dirs, 0, GH * I)],
                            a_arg=("in", 0), b_arg=("in", 1), y_arg=("tmp", 1))
        specs = self._specs(inputs, attrs)
        local = local_1d(info)
        size = groups_for(n, local, info)
        init_args = [("in", 3 + self.optional.index(x)) for x in ("initial_h", "initial_c") if x in sz["given"]]
        init_args += [("tmp", 2)] + ([("tmp", 4)] if self.states else [])
        steps.append(Launch(specs[0], (*init_args, n, B, H, dirs), size, (local,)))
        clip = float(attrs["clip"] or 0.0)
        for s in range(T):
            for phase, spec in enumerate(specs[1:]):
                args = self.step_args(sz, attrs, phase, s) + [n, T, B, H, GH, T * B, s, sz["rev0"], clip]
                steps.append(Launch(spec, tuple(args), size, (local,)))
        return Plan(steps, temps)

    def extra_temps(self, attrs: dict[str, Any]) -> int:
        """State-sized scratch tensors after the two hidden states (lstm's two cells, gru's r * h and z)."""
        return 2 * self.states

    # -- dialect building blocks ------------------------------------------------------------------------------------
    def step_params(self, sz: dict[str, Any], buffers: Sequence[Param]) -> tuple[Param, ...]:
        return (*buffers, *[Param(n, "int", "scalar") for n in ("n", "NT", "NB", "H", "GH", "TB", "s", "rev0")],
                Param("clip", "float", "scalar"))

    def input_params(self, sz: dict[str, Any]) -> list[Param]:
        """X-derived inputs every step kernel reads: xw, rt, B and sequence_lens where given."""
        ps = [Param("xw", "T", "in"), Param("rt", "T", "in")]
        if "B" in sz["given"]:
            ps.append(Param("bias", "T", "in"))
        if "sequence_lens" in sz["given"]:
            ps.append(Param("seq", "int", "in"))
        return ps

    def input_args(self, sz: dict[str, Any]) -> list[Any]:
        args: list[Any] = [("tmp", 1), ("tmp", 0)]
        for name in ("B", "sequence_lens"):
            if name in sz["given"]:
                args.append(("in", 3 + self.optional.index(name)))
        return args

    def prologue(self, sz: dict[str, Any]) -> str:
        """Decode the work item and its sequence: j (unit), b (batch row), d (direction), st (state row), L
        (length), t (time index of this step), xrow (its xw row)."""
        lines = ["    FOR_EACH(i, n) {\n", "        int j = i % H;\n", "        int r = i / H;\n",
                 "        int b = r % NB;\n", "        int d = r / NB;\n", "        int st = r * H;\n"]
        if "sequence_lens" not in sz["given"]:
            lines.append("        int L = NT;\n")
        else:
            lines.append("        int L = seq[b] < 0 ? 0 : (seq[b] > NT ? NT : seq[b]);\n")
        lines.append("        int t = (s < L && (d == 1 || rev0 == 1)) ? L - 1 - s : s;\n")
        row = "b * NT + t" if sz["layout"] else "t * NB + b"
        lines.append(f"        int xrow = (d * TB + {row}) * GH + j;\n")
        return "".join(lines)

    def gate(self, sz: dict[str, Any], g: int, name: str, recurrent_bias: bool = True) -> str:
        """Declare ``ACC name`` = this unit's gate ``g`` input projection plus its W bias (and R bias)."""
        expr = f"TO_ACC(xw[xrow + {g} * H])"
        if "B" in sz["given"]:
            expr += f" + TO_ACC(bias[d * 2 * GH + {g} * H + j])"
            if recurrent_bias:
                expr += f" + TO_ACC(bias[d * 2 * GH + GH + {g} * H + j])"
        return f"            ACC {name} = {expr};\n"

    @staticmethod
    def dot(source: str, targets: Sequence[tuple[str, int]]) -> str:
        """Add to each ACC ``name`` of ``targets`` (name, gate) the dot product of ``source`` (an expression of
        ``k``: the previous hidden state's element k) with that gate's row of R."""
        lines = ["            for (int k = 0; k < H; k++) {\n", f"                ACC hk = {source};\n",
                 "                int rr = (d * H + k) * GH + j;\n"]
        lines += [f"                {name} += hk * TO_ACC(rt[rr + {g} * H]);\n" for name, g in targets]
        lines.append("            }\n")
        return "".join(lines)

    @staticmethod
    def clipped(attrs: dict[str, Any], v: str) -> str:
        return v if attrs["clip"] is None else f"dl_min(dl_max({v}, -CAST(ACC, clip)), CAST(ACC, clip))"

    def act(self, attrs: dict[str, Any], slot: int, v: str) -> str:
        """Activation ``slot`` of this item's direction applied to the ACC variable ``v``."""
        per = len(self.default_activations)
        slots = attrs["activations"]
        forward = activation_code(slots[slot], v)
        if len(slots) == per or slots[slot] == slots[per + slot]:
            return forward
        return f"(d == 0 ? {forward} : {activation_code(slots[per + slot], v)})"

    def outputs_code(self, sz: dict[str, Any], finals: Sequence[tuple[str, str]] = (("Yh", "h"),)) -> str:
        """Write the new hidden state h to hn (the carried one past the sequence's end), Y (0 past the end) and, at the
        last step, each final-state output of ``finals`` (output, ACC variable; 0 for an empty sequence)."""
        layout, dirs = sz["layout"], sz["dirs"]
        y = f"((b * NT + t) * {dirs} + d) * H + j" if layout else f"((t * {dirs} + d) * NB + b) * H + j"
        final = f"(b * {dirs} + d) * H + j" if layout else "st + j"
        lines = ["        hn[st + j] = h;\n", f"        Y[{y}] = FROM_ACC(s < L ? h : CAST(ACC, 0.0f));\n",
                 "        if (s == NT - 1) {\n"]
        lines += [f"            {out}[{final}] = FROM_ACC(L == 0 ? CAST(ACC, 0.0f) : {v});\n" for out, v in finals]
        lines.append("        }\n")
        return "".join(lines)

    def spec(self, sz: dict[str, Any], attrs: dict[str, Any], tag: str, buffers: Sequence[Param],
             body: str) -> KernelSpec:
        """A step kernel named after the layer, its variant and a digest of its body."""
        digest = hashlib.sha1(body.encode()).hexdigest()[:10]
        return KernelSpec(f"{self.name}_{tag}_{sz['elem']}_{digest}", self.step_params(sz, buffers), body,
                          elem=sz["elem"])


def _states(sz: dict[str, Any], *names: str) -> list[Param]:
    """State buffers ("name:access") of the plan's state type."""
    return [Param(n.split(":")[0], sz["state"], n.split(":")[1]) for n in names]


def _hidden(s: int, first: int = 2) -> tuple[tuple[str, int], tuple[str, int]]:
    """(previous, next) of the two scratch states from temp ``first`` at step ``s``: they swap every step."""
    return ("tmp", first + s % 2), ("tmp", first + 1 - s % 2)


def _output_params(count: int) -> list[Param]:
    return [Param(n, "T", "out") for n in ("Y", "Yh", "Yc")[:count]]


@register
class Rnn(Recurrent):
    """rnn(X, W, R[, B, sequence_lens, initial_h], ...): ONNX RNN, H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""

    name = "rnn"
    max_inputs = 6

    def cell_numpy(self, xw, state, rt, bias, peep, act, attrs):
        pre = xw + _recur(state[0], rt)
        return [act(0, self.clip_numpy(pre, attrs["clip"]))]

    def step_specs(self, sz, attrs):
        body = (self.prologue(sz) + "        ACC h = hp[st + j];\n        if (s < L) {\n"
                + self.gate(sz, 0, "a")
                + self.dot("hp[st + k]", [("a", 0)])
                + f"            ACC v = {self.clipped(attrs, 'a')};\n"
                + f"            h = {self.act(attrs, 0, 'v')};\n        }}\n"
                + self.outputs_code(sz) + "    }")
        return [self.spec(sz, attrs, "step", [*self.input_params(sz), *_states(sz, "hp:in", "hn:out"),
                                              *_output_params(2)], body)]

    def step_args(self, sz, attrs, phase, s):
        return [*self.input_args(sz), *_hidden(s), ("out", 0), ("out", 1)]


@register
class Gru(Recurrent):
    """gru(X, W, R[, B, sequence_lens, initial_h], linear_before_reset=0, ...): ONNX GRU (gates z, r, h)."""

    name = "gru"
    max_inputs = 6
    gates = 3
    default_activations = ("sigmoid", "tanh")
    extra_attrs = ("linear_before_reset",)
    folds_bias = False  # the reset gate scales the recurrent bias of h's gate

    def check_extra(self, attrs):
        return {"linear_before_reset": self._flag(attrs, "linear_before_reset")}

    def extra_temps(self, attrs):
        return 0 if attrs["linear_before_reset"] else 2  # r * h and z between the two kernels of a step

    def cell_numpy(self, xw, state, rt, bias, peep, act, attrs):
        H, clip = attrs["hidden_size"], attrs["clip"]
        h = state[0]
        wb, rb = bias[..., :3 * H], bias[..., 3 * H:]
        if attrs["linear_before_reset"]:
            hr = _recur(h, rt)
            zr = xw[..., :2 * H] + hr[..., :2 * H] + wb[..., :2 * H] + rb[..., :2 * H]
        else:
            zr = xw[..., :2 * H] + _recur(h, rt[..., :2 * H]) + wb[..., :2 * H] + rb[..., :2 * H]
        z = act(0, self.clip_numpy(zr[..., :H], clip))
        r = act(0, self.clip_numpy(zr[..., H:], clip))
        if attrs["linear_before_reset"]:
            pre = xw[..., 2 * H:] + r * (hr[..., 2 * H:] + rb[..., 2 * H:]) + wb[..., 2 * H:]
        else:
            pre = xw[..., 2 * H:] + _recur(r * h, rt[..., 2 * H:]) + wb[..., 2 * H:] + rb[..., 2 * H:]
        hh = act(1, self.clip_numpy(pre, clip))
        return [(1 - z) * hh + z * h]

    def _gates_zr(self, sz, attrs) -> str:
        return self.gate(sz, 0, "az") + self.gate(sz, 1, "ar")

    def _z_r(self, attrs) -> str:
        return (f"            ACC vz = {self.clipped(attrs, 'az')};\n"
                f"            ACC z = {self.act(attrs, 0, 'vz')};\n"
                f"            ACC vr = {self.clipped(attrs, 'ar')};\n"
                f"            ACC rg = {self.act(attrs, 0, 'vr')};\n")

    def _candidate(self, attrs, pre: str) -> str:
        return (f"            ACC vh = {self.clipped(attrs, pre)};\n"
                f"            ACC hh = {self.act(attrs, 1, 'vh')};\n")

    def step_specs(self, sz, attrs):
        ins = self.input_params(sz)
        outs = _output_params(2)
        if attrs["linear_before_reset"]:
            rbh = "TO_ACC(bias[d * 2 * GH + GH + 2 * H + j])" if "B" in sz["given"] else "CAST(ACC, 0.0f)"
            body = (self.prologue(sz) + "        ACC h = hp[st + j];\n        if (s < L) {\n"
                    + self._gates_zr(sz, attrs) + self.gate(sz, 2, "ah", recurrent_bias=False)
                    + f"            ACC hr = {rbh};\n"
                    + self.dot("hp[st + k]", [("az", 0), ("ar", 1), ("hr", 2)])
                    + self._z_r(attrs) + "            ACC pre = ah + rg * hr;\n" + self._candidate(attrs, "pre")
                    + "            h = (CAST(ACC, 1.0f) - z) * hh + z * h;\n        }\n"
                    + self.outputs_code(sz) + "    }")
            return [self.spec(sz, attrs, "lbr", [*ins, *_states(sz, "hp:in", "hn:out"), *outs], body)]
        gates = (self.prologue(sz) + "        if (s < L) {\n" + self._gates_zr(sz, attrs)
                 + self.dot("hp[st + k]", [("az", 0), ("ar", 1)]) + self._z_r(attrs)
                 + "            zs[st + j] = z;\n            rh[st + j] = rg * hp[st + j];\n        }\n    }")
        candidate = (self.prologue(sz) + "        ACC h = hp[st + j];\n        if (s < L) {\n"
                     + self.gate(sz, 2, "ah") + self.dot("rh[st + k]", [("ah", 2)]) + self._candidate(attrs, "ah")
                     + "            ACC z = zs[st + j];\n"
                     "            h = (CAST(ACC, 1.0f) - z) * hh + z * h;\n        }\n"
                     + self.outputs_code(sz) + "    }")
        return [self.spec(sz, attrs, "gates", [*ins, *_states(sz, "hp:in", "rh:out", "zs:out")], gates),
                self.spec(sz, attrs, "candidate", [*ins, *_states(sz, "hp:in", "rh:in", "zs:in", "hn:out"), *outs],
                          candidate)]

    def step_args(self, sz, attrs, phase, s):
        hp, hn = _hidden(s)
        if attrs["linear_before_reset"]:
            return [*self.input_args(sz), hp, hn, ("out", 0), ("out", 1)]
        if phase == 0:
            return [*self.input_args(sz), hp, ("tmp", 4), ("tmp", 5)]
        return [*self.input_args(sz), hp, ("tmp", 4), ("tmp", 5), hn, ("out", 0), ("out", 1)]


@register
class Lstm(Recurrent):
    """lstm(X, W, R[, B, sequence_lens, initial_h, initial_c, P], input_forget=0, ...): ONNX LSTM (gates i, o, f,
    c; peepholes P for i, o, f); outputs Y, Y_h, Y_c."""

    name = "lstm"
    max_inputs = 8
    gates = 4
    states = 1
    default_activations = ("sigmoid", "tanh", "tanh")
    optional = ("B", "sequence_lens", "initial_h", "initial_c", "P")
    extra_attrs = ("input_forget",)

    def check_extra(self, attrs):
        return {"input_forget": self._flag(attrs, "input_forget")}

    def cell_numpy(self, xw, state, rt, bias, peep, act, attrs):
        H, clip = attrs["hidden_size"], attrs["clip"]
        h, c = state
        pre = xw + _recur(h, rt)
        if peep is None and not attrs["input_forget"]:  # i, o and f through one call of their function
            gates = act(0, self.clip_numpy(pre[..., :3 * H], clip))
            c = gates[..., 2 * H:] * c + gates[..., :H] * act(1, self.clip_numpy(pre[..., 3 * H:], clip))
            return [gates[..., H:2 * H] * act(2, c), c]
        ai, ao, af, ac = (pre[..., g * H:(g + 1) * H] for g in range(4))
        pi, po, pf = (0, 0, 0) if peep is None else (peep[..., :H], peep[..., H:2 * H], peep[..., 2 * H:])
        i = act(0, self.clip_numpy(ai + pi * c, clip))
        f = 1 - i if attrs["input_forget"] else act(0, self.clip_numpy(af + pf * c, clip))
        c = f * c + i * act(1, self.clip_numpy(ac, clip))
        o = act(0, self.clip_numpy(ao + po * c, clip))
        return [o * act(2, c), c]

    def step_specs(self, sz, attrs):
        has_p = "P" in sz["given"]

        def peep(gate: int) -> str:
            return f" + TO_ACC(p[d * 3 * H + {gate} * H + j]) * c" if has_p else ""

        if attrs["input_forget"]:
            forget = "            ACC gf = CAST(ACC, 1.0f) - gi;\n"
        else:
            forget = (f"            ACC vf = af{peep(2)};\n            vf = {self.clipped(attrs, 'vf')};\n"
                      f"            ACC gf = {self.act(attrs, 0, 'vf')};\n")
        body = (self.prologue(sz) + "        ACC h = hp[st + j];\n        ACC c = cp[st + j];\n"
                "        if (s < L) {\n"
                + "".join(self.gate(sz, g, name) for g, name in enumerate(("ai", "ao", "af", "ac")))
                + self.dot("hp[st + k]", [("ai", 0), ("ao", 1), ("af", 2), ("ac", 3)])
                + f"            ACC vi = ai{peep(0)};\n            vi = {self.clipped(attrs, 'vi')};\n"
                f"            ACC gi = {self.act(attrs, 0, 'vi')};\n" + forget
                + f"            ACC vc = {self.clipped(attrs, 'ac')};\n"
                f"            ACC gc = {self.act(attrs, 1, 'vc')};\n"
                "            c = gf * c + gi * gc;\n"
                f"            ACC vo = ao{peep(1)};\n            vo = {self.clipped(attrs, 'vo')};\n"
                f"            ACC go = {self.act(attrs, 0, 'vo')};\n"
                f"            h = go * {self.act(attrs, 2, 'c')};\n        }}\n"
                "        cn[st + j] = c;\n" + self.outputs_code(sz, (("Yh", "h"), ("Yc", "c"))) + "    }")
        ins = self.input_params(sz) + ([Param("p", "T", "in")] if has_p else [])
        return [self.spec(sz, attrs, "step", [*ins, *_states(sz, "hp:in", "cp:in", "hn:out", "cn:out"),
                                              *_output_params(3)], body)]

    def step_args(self, sz, attrs, phase, s):
        p = [("in", 3 + self.optional.index("P"))] if "P" in sz["given"] else []
        (hp, hn), (cp, cn) = _hidden(s), _hidden(s, 4)
        return [*self.input_args(sz), *p, hp, cp, hn, cn, ("out", 0), ("out", 1), ("out", 2)]
