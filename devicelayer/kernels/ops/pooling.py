"""Pooling: max_pool (and max_pool_with_indices), average_pool, lp_pool (1-D/2-D/3-D, ONNX MaxPool/AveragePool/
LpPool), max_unpool (ONNX MaxUnpool) and the global pools.

Windowed pools run one kernel that treats every input as 3-D spatial (missing
dims have size 1, kernel 1, stride 1, no padding), one output element per work
item.  The global pools reduce each (n, c) row in one work-group.

Conventions (ONNX, as onnxruntime and PyTorch):
* pads are ``[begin_0, ..., begin_k, end_0, ..., end_k]``; padded positions never win a max;
* ``ceil_mode`` rounds the output size up, but a window starting past the input and
  its begin padding is dropped;
* ``count_include_pad`` divides by the window positions inside the padded extent
  ``[-begin, size + end)``, otherwise by those inside the input (0 when there are none:
  the output is then 0; a max over no input element is -inf);
* ``auto_pad`` SAME_UPPER/SAME_LOWER give ``ceil(size / stride)`` outputs and ignore
  ``ceil_mode``; the total pad is the spec's ``(out - 1) * stride + dilated window - size``
  (onnxruntime leaves dilation out of it), at least 0 (as TensorFlow; onnxruntime's MaxPool
  refuses a negative one and its AveragePool shifts the windows), split with the odd one at
  the end / the begin; VALID is no padding, with ``ceil_mode`` honoured as onnxruntime does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...dtypes import arithmetic, computes_as_float
from ...errors import UnsupportedOp
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, parallel, register
from ..render import lacks
from .numeric import computable
from .movement import copy_type, int_attr, ints_attr, refuse_unknown
from .windows import padded, rows, runs, windows

_AUTO_PAD = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _flat(xp: np.ndarray, k: Sequence[int], d: Sequence[int], out: Sequence[int], combine: Any,
          last_stride: int = 1) -> np.ndarray:
    """A max or sum pool of ``xp`` (C-ordered, padded for every window), stride 1 but along the last axis
    (``last_stride``), axis by axis, each pass one ufunc call over the flattened array (a window position is a
    fixed offset into it); a view (*xp.shape[:2], *out) of the result.  The positions that no output reads
    (between rows, between strided outputs) are computed and never read."""
    item = xp.itemsize
    pst = [st // item for st in xp.strides[2:]]
    cur = xp.reshape(-1)
    for kk, dd, ps in zip(k, d, pst):
        if kk == 1:
            continue
        u = dd * ps
        n = cur.size - (kk - 1) * u
        nxt = np.empty(n, xp.dtype)
        combine(cur[:n], cur[u:u + n], out=nxt)
        for j in range(2, kk):
            combine(nxt, cur[j * u:j * u + n], out=nxt)
        cur = nxt
    steps = [p * item for p in pst]
    steps[-1] *= last_stride
    return np.lib.stride_tricks.as_strided(cur, tuple(xp.shape[:2]) + tuple(out), tuple(xp.strides[:2]) + tuple(steps),
                                           writeable=False)


def _lowest(dtype: np.dtype) -> float:
    """The value that never wins a max in ``dtype``: -inf, or an integer type's minimum."""
    return -np.inf if computes_as_float(dtype) else float(np.iinfo(dtype).min)


def _powered(x: np.ndarray, p: int) -> np.ndarray:
    """``|x| ** p`` in x's accumulation dtype (an Lp pool sums these)."""
    x = x.astype(arithmetic(x.dtype), copy=False)
    with np.errstate(all="ignore"):
        return x * x if p == 2 else np.abs(x) ** x.dtype.type(p)


def _root(pooled: np.ndarray, p: int, out: np.ndarray | None = None) -> np.ndarray:
    """``pooled ** (1 / p)`` (into ``out`` when given)."""
    out = np.empty(pooled.shape, pooled.dtype) if out is None else out
    with np.errstate(all="ignore"):
        if p == 1:
            np.copyto(out, pooled)
        elif p == 2:
            np.sqrt(pooled, out=out)
        else:
            np.power(pooled, 1.0 / p, out=out)
    return out


class _Pool(Op):
    """Shared checks of the windowed pools."""

    #: average windows' counts per geometry (``_divisor``)
    _divisor_cache: dict[tuple, np.ndarray] = {}

    kind = ""
    extra_attrs: tuple[str, ...] = ()
    #: integer dtypes the pool takes besides the floats
    int_dtypes: tuple[str, ...] = ()

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        refuse_unknown(self, attrs, ["kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad",
                                     *self.extra_attrs])
        x = inputs[0]
        if not computes_as_float(x.dtype) and x.dtype.name not in self.int_dtypes:
            allowed = f" or one of {list(self.int_dtypes)}" if self.int_dtypes else ""
            raise self.error(f"needs a floating-point input{allowed}, got {x.dtype}")
        if not 3 <= len(x.shape) <= 5:
            raise self.error(f"needs an (N, C, spatial...) input with 1 to 3 spatial dims, got {x.shape}")
        nd = len(x.shape) - 2
        spatial = x.shape[2:]
        kernel = ints_attr(self, attrs, "kernel_shape", required=True, length=nd)
        strides = ints_attr(self, attrs, "strides", (1,) * nd, length=nd)
        dilations = ints_attr(self, attrs, "dilations", (1,) * nd, length=nd)
        for name, vals in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
            if any(v < 1 for v in vals):
                raise self.error(f"{name} must be >= 1, got {list(vals)}")
        ceil_mode = int_attr(self, attrs, "ceil_mode", 0)
        if ceil_mode not in (0, 1):
            raise self.error(f"ceil_mode must be 0 or 1, got {ceil_mode}")
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if isinstance(auto_pad, bytes):
            auto_pad = auto_pad.decode()
        if auto_pad not in _AUTO_PAD:
            raise self.error(f"auto_pad must be one of {list(_AUTO_PAD)}, got {auto_pad!r}")
        pads = ints_attr(self, attrs, "pads", None, length=2 * nd)
        if pads is not None and auto_pad != "NOTSET" and any(pads):
            raise self.error(f"pads cannot be given with auto_pad={auto_pad}")
        if pads is not None and any(p < 0 for p in pads):
            raise self.error(f"pads must be >= 0, got {list(pads)}")
        checked = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "ceil_mode": ceil_mode,
                   "auto_pad": auto_pad,
                   "pads": pads if pads is not None and auto_pad == "NOTSET" else (0,) * (2 * nd)}
        for k, (b, e, o) in enumerate(zip(*self.geometry(spatial, checked))):
            ext = (kernel[k] - 1) * dilations[k] + 1
            if auto_pad in ("NOTSET", "VALID") and spatial[k] + b + e - ext < 0:
                raise self.error(f"the window ({ext} with dilation) is larger than spatial dim {k} "
                                 f"({spatial[k]}) with its padding ({b}, {e})")
        return self.check_extra(checked, attrs)

    def check_extra(self, checked: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
        return checked

    @staticmethod
    def geometry(spatial: Sequence[int], attrs: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
        """Pads at the begin and end, and output size, of every spatial dim (attributes checked)."""
        nd = len(spatial)
        begins, ends, out = [], [], []
        for k in range(nd):
            size, st = spatial[k], attrs["strides"][k]
            ext = (attrs["kernel_shape"][k] - 1) * attrs["dilations"][k] + 1
            if attrs["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
                o = -(-size // st)
                total = max(0, (o - 1) * st + ext - size)  # as TensorFlow: never negative
                b = total // 2 if attrs["auto_pad"] == "SAME_UPPER" else total - total // 2
                e = total - b
            else:
                b, e = attrs["pads"][k], attrs["pads"][nd + k]
                span = size + b + e - ext
                if attrs["ceil_mode"]:
                    o = -(-span // st) + 1
                    if (o - 1) * st >= size + b:  # a window starting past the input and its begin pad
                        o -= 1
                else:
                    o = span // st + 1
            begins.append(b)
            ends.append(e)
            out.append(max(o, 0))
        return begins, ends, out

    def infer(self, inputs, attrs):
        return [TensorType.of(inputs[0].shape[:2] + tuple(self.geometry(inputs[0].shape[2:], attrs)[2]),
                              inputs[0].dtype)]

    def _padded(self, x: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, list[int], list[int]]:
        """``x`` in its accumulation dtype, padded with a value that never wins (max) or adds nothing (average),
        far enough for every window (ceil_mode may reach past the end padding); the begin pads, output size."""
        k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        begins, ends, out = self.geometry(x.shape[2:], attrs)
        reach = [max(b + n + e, (o - 1) * st + (kk - 1) * dd + 1 if o else 0)
                 for b, n, e, o, st, kk, dd in zip(begins, x.shape[2:], ends, out, s, k, d)]
        xp = np.ascontiguousarray(padded(x.astype(arithmetic(x.dtype), copy=False), begins,
                                         [r - b - n for r, b, n in zip(reach, begins, x.shape[2:])],
                                         _lowest(x.dtype) if self.kind == "max" else 0.0))
        return xp, begins, out

    def _divisors(self, x: np.ndarray, attrs: dict[str, Any], begins: Sequence[int], ends: Sequence[int],
                  out: Sequence[int]) -> np.ndarray:
        """Each average window's count: its positions inside the input, or inside the padded extent
        [-begin, size + end) (``count_include_pad``), a product over the spatial dims (positions counted from
        the padded begin)."""
        k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        cip = attrs["count_include_pad"]
        div = np.ones(out, np.int64)
        for i, (kk, st, dd, o, n) in enumerate(zip(k, s, d, out, x.shape[2:])):
            pos = np.arange(o)[:, None] * st + np.arange(kk)[None, :] * dd
            lo, hi = (0, begins[i] + n + ends[i]) if cip else (begins[i], begins[i] + n)
            inside = ((pos >= lo) & (pos < hi)).sum(axis=1)
            div = div * inside.reshape((-1,) + (1,) * (len(k) - 1 - i))
        return div

    def reference(self, inputs, attrs):
        x = _powered(inputs[0], attrs["p"]) if self.kind == "lp" else computable(inputs[0])
        k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        begins, ends, out = self.geometry(x.shape[2:], attrs)
        acc_t = arithmetic(x.dtype)
        xp = self._padded(x, attrs)[0]  # then one strided view of all windows
        shape = x.shape[:2] + tuple(out)
        flat = all(st == 1 for st in s) and all(out)  # stride 1: each kernel position is one long run
        if flat:
            win, full = runs(xp, k, d, shape)
            acc = full[..., :win.shape[-1]]
        else:
            win, acc = windows(xp, k, s, d, out), np.empty(shape, acc_t)
        combine = np.maximum if self.kind == "max" else np.add
        for j, kpos in enumerate(np.ndindex(*k)):
            if j == 0:
                acc[...] = win[(slice(None), slice(None)) + kpos]
            else:
                combine(acc, win[(slice(None), slice(None)) + kpos], out=acc)
        if flat:
            acc = rows(full, xp, shape)
        if self.kind == "avg":
            div = self._divisors(x, attrs, begins, ends, out)
            with np.errstate(all="ignore"):
                acc /= np.maximum(div, 1).astype(acc_t)
                if not div.all():  # windows with no element to count give 0
                    acc[np.broadcast_to(div == 0, acc.shape)] = 0
        if self.kind == "lp":
            acc = _root(acc, attrs["p"])
        return [acc.astype(inputs[0].dtype, copy=False)]

    def reference_into(self, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if arithmetic(x.dtype) != x.dtype or not y.size:
            return super().reference_into(inputs, outputs, attrs)
        N, C = x.shape[:2]
        rows_in = x.reshape((1, N * C) + x.shape[2:])  # every (image, channel) is independent
        rows_out = y.reshape((1, N * C) + y.shape[2:])
        parallel(lambda a, b: self._separable(rows_in[:, a:b], attrs, rows_out[:, a:b]), N * C,
                 x.nbytes + y.nbytes)
        return None

    def _separable(self, x: np.ndarray, attrs: dict[str, Any], y: np.ndarray) -> None:
        """The pool of ``x`` into ``y``, one spatial axis at a time (a max or sum over a box is one over each
        of its sides in turn): kernel-1 passes per axis instead of one per window position.  Stride 1 runs
        each pass over the whole flattened image at once (``_flat``); strided pools reduce every axis but the
        last by strided slices, then the last one flat, keeping every stride-th result."""
        k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        xp, begins, out = self._padded(_powered(x, attrs["p"]) if self.kind == "lp" else x, attrs)
        combine = np.maximum if self.kind == "max" else np.add
        divisor = self._divisor(x, attrs, begins, out, y.dtype) if self.kind == "avg" else None
        if all(st == 1 for st in s):
            pooled = _flat(xp, k, d, out, combine)
        else:
            pooled = self._strided(xp, k, s, d, out, combine)
        if self.kind == "lp":
            _root(pooled, attrs["p"], y)
        elif divisor is None:
            np.copyto(y, pooled)
        else:
            with np.errstate(all="ignore"):
                np.divide(pooled, divisor, out=y)

    @staticmethod
    def _strided(xp: np.ndarray, k: Sequence[int], s: Sequence[int], d: Sequence[int], out: Sequence[int],
                 combine: Any) -> np.ndarray:
        """A strided max or sum pool of ``xp``: every axis but the last by strided slices (whole rows at a
        time), the last one flat (``_flat``); a view of the result."""
        cur = xp
        for i in range(len(k) - 1):
            o, st, dd = out[i], s[i], d[i]
            lead = (slice(None),) * (2 + i)
            taps = [cur[lead + (slice(j * dd, j * dd + (o - 1) * st + 1, st),)] for j in range(k[i])]
            nxt = np.empty(taps[0].shape, cur.dtype)
            if len(taps) == 1:
                np.copyto(nxt, taps[0])
            else:
                combine(taps[0], taps[1], out=nxt)
                for tap in taps[2:]:
                    combine(nxt, tap, out=nxt)
            cur = nxt  # (a new C-ordered array, as ``xp`` is)
        ones = (1,) * (len(k) - 1)
        return _flat(cur, ones + (k[-1],), ones + (d[-1],), cur.shape[2:-1] + (out[-1],), combine, s[-1])

    def _divisor(self, x: np.ndarray, attrs: dict[str, Any], begins: Sequence[int], out: Sequence[int],
                 dtype: np.dtype) -> np.ndarray:
        """Each average window's count as ``dtype``, infinite where it is 0 (a sum over no element is 0, and so
        is its average); kept per geometry."""
        key = (x.shape[2:], tuple(attrs["kernel_shape"]), tuple(attrs["strides"]), tuple(attrs["dilations"]),
               tuple(attrs["pads"]), attrs["auto_pad"], attrs["ceil_mode"], attrs["count_include_pad"],
               np.dtype(dtype).str)  # what decides the windows (their begins and the output size follow)
        found = self._divisor_cache.get(key)
        if found is None:
            div = self._divisors(x, attrs, begins, self.geometry(x.shape[2:], attrs)[1], out).astype(dtype)
            div[div == 0] = np.inf
            div.flags.writeable = False
            if len(self._divisor_cache) >= 64:
                self._divisor_cache.clear()
            found = self._divisor_cache.setdefault(key, div)
        return found

    def plan(self, inputs, outputs, attrs, info: DeviceInfo) -> Plan:
        x = inputs[0]
        nd = len(x.shape) - 2
        pad = 3 - nd

        def three(vals, fill):
            return [fill] * pad + [int(v) for v in vals]

        spatial = three(x.shape[2:], 1)
        begins, ends, _ = self.geometry(x.shape[2:], attrs)
        out = three(outputs[0].shape[2:], 1)
        pb, pe = three(begins, 0), three(ends, 0)
        elem = dialect_type(x.dtype)
        n = outputs[0].size
        args: list[Any] = [("in", 0), *[("out", j) for j in range(len(outputs))], n, *spatial, *out,
                           *three(attrs["kernel_shape"], 1), *three(attrs["strides"], 1), *pb,
                           *three(attrs["dilations"], 1)]
        args += self.extra_args(attrs, spatial, pe)
        spec = _pool_spec(self.kind, elem, self.variant(attrs), _lowest(x.dtype))
        local = local_1d(info)
        return Plan([Launch(spec, tuple(args), groups_for(n, local, info), (local,))])

    def variant(self, attrs: dict[str, Any]) -> str:
        """Which form of the pool's kernel a call needs (the Lp pool's p, the max pool's indices)."""
        return ""

    def extra_args(self, attrs: dict[str, Any], spatial: Sequence[int], ends: Sequence[int]) -> list[Any]:
        """Scalars the pool's kernel takes after the window's."""
        return []


_WINDOW_SCALARS = ("n", "D", "H", "W", "OD", "OH", "OW", "KD", "KH", "KW", "SD", "SH", "SW", "PD", "PH", "PW",
                   "DD", "DH", "DW")


def _pool_spec(kind: str, elem: str, variant: str, lowest: float) -> KernelSpec:
    """The windowed pool kernel: ``kind`` max, avg or lp; ``variant`` "indices" (max: the Indices output too),
    or the Lp pool's p ("1", "2", "p": any, as the scalar ``pw``)."""
    names = list(_WINDOW_SCALARS)
    floats: list[str] = []
    outs = [Param("y", "T", "out")]
    if kind == "max":
        init = "-DL_INF" if lowest == -np.inf else f"CAST(ACC, {lowest})"
        if variant == "indices":
            names.append("col")
            outs.append(Param("idx", "i64", "out"))
            step = ("if (at < 0 || v > acc) {\n                        acc = v;\n"
                    "                        at = col != 0 ? id + (ih + iw * H) * D : (id * H + ih) * W + iw;\n"
                    "                    }")
            init += "; int at = -1"
        else:
            step = "acc = dl_max(acc, v);"
    elif kind == "avg":
        names += ["ED", "EH", "EW", "cip"]
        init, step = "CAST(ACC, 0.0f); int cnt = 0", "acc = acc + v; cnt++;"
    else:
        if variant == "p":
            floats.append("pw")
        power = {"1": "dl_abs(v)", "2": "v * v"}.get(variant, "dl_pow(dl_abs(v), CAST(ACC, pw))")
        init, step = "CAST(ACC, 0.0f)", f"acc = acc + {power};"
    body = f"""    FOR_EACH(i, n) {{
        int ow = i % OW; int t = i / OW;
        int oh = t % OH; t = t / OH;
        int od = t % OD; int nc = t / OD;
        int d0 = od * SD - PD; int h0 = oh * SH - PH; int w0 = ow * SW - PW;
        int base = nc * D * H * W;
        ACC acc = {init};
        for (int kd = 0; kd < KD; kd++) {{
            int id = d0 + kd * DD;
            if (id < 0 || id >= D) continue;
            for (int kh = 0; kh < KH; kh++) {{
                int ih = h0 + kh * DH;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < KW; kw++) {{
                    int iw = w0 + kw * DW;
                    if (iw < 0 || iw >= W) continue;
                    ACC v = TO_ACC(x[base + (id * H + ih) * W + iw]);
                    {step}
                }}
            }}
        }}
"""
    if kind == "max":
        body += "        y[i] = FROM_ACC(acc);\n"
        if variant == "indices":
            body += "        idx[i] = at < 0 ? CAST(i64, -1) : CAST(i64, base) + CAST(i64, at);\n"
        body += "    }"
    elif kind == "lp":
        root = {"1": "acc", "2": "dl_sqrt(acc)"}.get(variant, "dl_pow(acc, CAST(ACC, 1.0f) / CAST(ACC, pw))")
        body += f"        y[i] = FROM_ACC({root});\n    }}"
    else:
        body += """        int dv = cnt;
        if (cip != 0) {
            int nd = 0; int nh = 0; int nw = 0;
            for (int k = 0; k < KD; k++) { int p = d0 + k * DD; if (p >= -PD && p < ED) nd++; }
            for (int k = 0; k < KH; k++) { int p = h0 + k * DH; if (p >= -PH && p < EH) nh++; }
            for (int k = 0; k < KW; k++) { int p = w0 + k * DW; if (p >= -PW && p < EW) nw++; }
            dv = nd * nh * nw;
        }
        y[i] = FROM_ACC(dv > 0 ? acc / CAST(ACC, dv) : CAST(ACC, 0.0f));
    }"""
    params = (Param("x", "T", "in"), *outs, *[Param(nm, "int", "scalar") for nm in names],
              *[Param(nm, "float", "scalar") for nm in floats])
    return KernelSpec(f"pool_{kind}{variant}_{elem}", params, body, elem=elem)


@register
class MaxPool(_Pool):
    """max_pool(x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order): ONNX MaxPool's
    Y (``max_pool_with_indices`` gives Indices too; storage_order only orders those).

    Floats, and int8/uint8 (padding is the type's minimum, never the max of a window that has an element).
    """

    name = "max_pool"
    kind = "max"
    extra_attrs = ("storage_order",)
    int_dtypes = ("int8", "uint8")
    kernel_dtypes = frozenset({"float32", "float16", "float64", "int8", "uint8"})

    def check_extra(self, checked, attrs):
        order = int_attr(self, attrs, "storage_order", 0)
        if order not in (0, 1):
            raise self.error(f"storage_order must be 0 or 1, got {order}")
        return {**checked, "storage_order": order}


@register
class MaxPoolWithIndices(MaxPool):
    """max_pool_with_indices(x, ...) -> (Y, Indices): ONNX MaxPool with its second output.

    Indices (int64) are flat positions in x of each window's maximum: the first element met in row-major
    window order, replaced by each later one greater than it (a NaN met first stays, as in the spec's
    reference); storage_order 1 numbers each image's positions column-major (the
    first spatial axis fastest).  A window with no input element gives -1.
    """

    name = "max_pool_with_indices"

    def infer(self, inputs, attrs):
        y = super().infer(inputs, attrs)[0]
        return [y, TensorType.of(y.shape, np.int64)]

    def reference(self, inputs, attrs):
        x = computable(inputs[0])
        k, s, d = attrs["kernel_shape"], attrs["strides"], attrs["dilations"]
        begins, _, out = self.geometry(x.shape[2:], attrs)
        xp = self._padded(x, attrs)[0]
        win = windows(xp, k, s, d, out)  # (N, C, *k, *out)
        nk, nd = len(k), len(out)
        flat = win.reshape(win.shape[:2] + (-1,) + tuple(out))
        # each axis's input coordinate of every kernel position of every window; positions outside the input
        # (padding) never win, then the first valid one (every value -inf or NaN) when no value beat the padding
        coords = [np.arange(o)[None, :] * st - b + np.arange(kk)[:, None] * dd
                  for o, st, b, kk, dd in zip(out, s, begins, k, d)]
        valid = np.ones(tuple(k) + tuple(out), bool)
        for a, (c, size) in enumerate(zip(coords, x.shape[2:])):
            shape = [1] * (nk + nd)
            shape[a], shape[nk + a] = c.shape
            valid &= ((c >= 0) & (c < size)).reshape(shape)
        valid = valid.reshape((-1,) + tuple(out))
        with np.errstate(invalid="ignore"):
            keyed = np.where(valid & ~np.isnan(flat), flat, -np.inf) if x.dtype.kind == "f" else flat
        best = np.argmax(keyed, axis=2)
        first_valid = np.argmax(valid, axis=0)
        top = np.take_along_axis(keyed, best[:, :, None], axis=2)[:, :, 0]
        beaten = top > (-np.inf if x.dtype.kind == "f" else _lowest(x.dtype))
        best_valid = np.take_along_axis(np.broadcast_to(valid, flat.shape), best[:, :, None], axis=2)[:, :, 0]
        pick = np.where(beaten | best_valid, best, first_valid[None, None])
        if x.dtype.kind == "f":  # a NaN met first is kept: nothing compares greater than it
            first = np.take_along_axis(flat, np.broadcast_to(first_valid, pick.shape)[:, :, None], axis=2)[:, :, 0]
            pick = np.where(np.isnan(first), first_valid[None, None], pick)
        y = np.take_along_axis(flat, pick[:, :, None], axis=2)[:, :, 0]
        kpos = np.unravel_index(pick, tuple(k))
        grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
        pos = [g * st - b + kp * dd for g, st, b, kp, dd in zip(grids, s, begins, kpos, d)]
        spatial = x.shape[2:]
        order = range(nd) if attrs["storage_order"] == 0 else reversed(range(nd))
        index = np.zeros(pick.shape, np.int64)
        for a in order:
            index = index * spatial[a] + pos[a]
        planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * nd)
        index += planes * int(np.prod(spatial, dtype=np.int64))
        empty = ~valid.any(axis=0)
        if empty.any():
            index[:, :, empty] = -1
        return [y.astype(inputs[0].dtype), index]

    def reference_into(self, inputs, outputs, attrs):
        return Op.reference_into(self, inputs, outputs, attrs)

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and "int64" not in info.dtypes:
            return f"{info.id} has no int64"
        return why

    def variant(self, attrs):
        return "indices"

    def extra_args(self, attrs, spatial, ends):
        return [attrs["storage_order"]]


@register
class AveragePool(_Pool):
    """average_pool(x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, count_include_pad).

    ONNX AveragePool.
    """

    name = "average_pool"
    kind = "avg"
    extra_attrs = ("count_include_pad",)

    def check_extra(self, checked, attrs):
        cip = int_attr(self, attrs, "count_include_pad", 0)
        if cip not in (0, 1):
            raise self.error(f"count_include_pad must be 0 or 1, got {cip}")
        return {**checked, "count_include_pad": cip}

    def extra_args(self, attrs, spatial, ends):
        return [s + e for s, e in zip(spatial, ends)] + [int(attrs["count_include_pad"])]


@register
class LpPool(_Pool):
    """lp_pool(x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, p=2): ONNX LpPool,
    ``(sum over the window of |x| ** p) ** (1 / p)``; padding adds nothing."""

    name = "lp_pool"
    kind = "lp"
    extra_attrs = ("p",)

    def check_extra(self, checked, attrs):
        p = int_attr(self, attrs, "p", 2)
        if p < 1:
            raise self.error(f"p must be >= 1, got {p}")
        return {**checked, "p": p}

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            code = "dl_pow(" if self.variant(attrs) == "p" else ""
            lacking = lacks(code, info.kernel_language, dialect_type(inputs[0].dtype))
            if lacking:
                return f"{self.name}: {lacking}"
        return why

    def variant(self, attrs):
        return str(attrs["p"]) if attrs["p"] in (1, 2) else "p"

    def extra_args(self, attrs, spatial, ends):
        return [float(attrs["p"])] if self.variant(attrs) == "p" else []


@register
class MaxUnpool(Op):
    """max_unpool(x, indices, kernel_shape, strides, pads, output_shape): ONNX MaxUnpool.

    Each x value lands at its flat index in a zero tensor of the shape MaxPool's input had ((in - 1) *
    stride - pads + kernel per spatial axis); a larger ``output_shape`` (full, N and C included) holds that
    tensor in its leading corner, as the spec's reference places it.  Indices outside it are ignored;
    repeated ones keep one of their values.
    """

    name = "max_unpool"
    min_inputs = 2
    max_inputs = 2
    kernel_dtypes = frozenset({"float32", "float16", "float64", "int32", "int64", "int8", "uint8", "int16",
                               "uint16", "uint32", "uint64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["kernel_shape", "strides", "pads", "output_shape"])
        x, idx = inputs
        if not 3 <= len(x.shape) <= 5:
            raise self.error(f"needs an (N, C, spatial...) input with 1 to 3 spatial dims, got {x.shape}")
        if idx.dtype != np.int64 or idx.shape != x.shape:
            raise self.error(f"indices must be int64 of x's shape {x.shape}, got {idx.dtype} {idx.shape}")
        nd = len(x.shape) - 2
        kernel = ints_attr(self, attrs, "kernel_shape", required=True, length=nd)
        strides = ints_attr(self, attrs, "strides", (1,) * nd, length=nd)
        pads = ints_attr(self, attrs, "pads", (0,) * (2 * nd), length=2 * nd)
        if min(kernel) < 1 or min(strides) < 1 or min(pads) < 0:
            raise self.error(f"kernel_shape and strides must be >= 1 and pads >= 0, got {list(kernel)}, "
                             f"{list(strides)}, {list(pads)}")
        checked = {"kernel_shape": kernel, "strides": strides, "pads": pads}
        inferred = self._inferred(x.shape, checked)
        if min(inferred[2:]) < 1:
            raise self.error(f"kernel, strides and pads leave no output ({inferred})")
        shape = ints_attr(self, attrs, "output_shape", None, length=len(x.shape))
        if shape is not None:
            if any(a < b for a, b in zip(shape, inferred)) or tuple(shape[:2]) != tuple(inferred[:2]):
                raise self.error(f"output_shape {list(shape)} must keep N and C and hold the unpooled "
                                 f"shape {list(inferred)}")
            checked["output_shape"] = shape
        return checked

    @staticmethod
    def _inferred(shape: Sequence[int], attrs: dict[str, Any]) -> tuple[int, ...]:
        k, s, p = attrs["kernel_shape"], attrs["strides"], attrs["pads"]
        nd = len(k)
        return tuple(shape[:2]) + tuple((shape[2 + i] - 1) * s[i] - p[i] - p[nd + i] + k[i] for i in range(nd))

    def infer(self, inputs, attrs):
        shape = attrs.get("output_shape") or self._inferred(inputs[0].shape, attrs)
        return [TensorType.of(shape, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x, idx = inputs
        inferred = self._inferred(x.shape, attrs)
        flat = np.zeros(int(np.prod(inferred, dtype=np.int64)), x.dtype)
        keep = (idx >= 0) & (idx < flat.size)
        flat[idx[keep]] = x[keep]
        y = np.zeros(self.infer([TensorType.of(x.shape, x.dtype), TensorType.of(idx.shape, idx.dtype)], attrs)[0].shape,
                     x.dtype)
        y[tuple(slice(0, n) for n in inferred)] = flat.reshape(inferred)
        return [y]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python" and copy_type(inputs[0].dtype) is None:
            return f"{self.name} has no {info.kernel_language} kernel for {inputs[0].dtype}"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        nd = len(x.shape) - 2
        pad = (1,) * (3 - nd)
        inferred = pad + self._inferred(x.shape, attrs)[2:]
        out = pad + outputs[0].shape[2:]
        planes = x.shape[0] * x.shape[1]
        ct = copy_type(x.dtype)
        local = local_1d(info)
        fill = KernelSpec(f"max_unpool_zero_{ct}", (Param("y", "T", "out"), Param("n", "int", "scalar")),
                          "    FOR_EACH(i, n) {\n        y[i] = CAST(T, 0);\n    }", elem=ct)
        body = """    const i64 S = CAST(i64, ID) * CAST(i64, IH) * CAST(i64, IW);
    FOR_EACH(i, n) {
        const i64 at = idx[i];
        if (at < CAST(i64, 0) || at >= S * CAST(i64, planes)) continue;
        const int nc = CAST(int, at / S);
        int r = CAST(int, at - CAST(i64, nc) * S);
        const int w = r % IW; r = r / IW;
        const int h = r % IH; const int d = r / IH;
        if (d < OD && h < OH && w < OW) y[((nc * OD + d) * OH + h) * OW + w] = x[i];
    }"""
        scatter = KernelSpec(f"max_unpool_scatter_{ct}", (Param("x", "T"), Param("idx", "i64"), Param("y", "T", "out"),
                                                            *[Param(nm, "int", "scalar") for nm in
                                                              ("n", "planes", "ID", "IH", "IW", "OD", "OH", "OW")]),
                             body, elem=ct)
        n_out, n = outputs[0].size, x.size
        return Plan([Launch(fill, (("out", 0), n_out), groups_for(n_out, local, info), (local,)),
                     Launch(scatter, (("in", 0), ("in", 1), ("out", 0), n, planes, *inferred, *out),
                            groups_for(n, local, info), (local,))])


# -- global pools ------------------------------------------------------------------------------------
_GLOBAL_LOCAL = 64


def _global_spec(kind: str, elem: str) -> KernelSpec:
    combine = "dl_max(a, b)" if kind == "max" else "a + b"
    init = "-DL_INF" if kind == "max" else "CAST(ACC, 0.0f)"
    finish = "red[0]" if kind == "max" else "red[0] / CAST(ACC, s)"
    body = f"""    for (int row = GROUP(0); row < rows; row += NGROUPS(0)) {{
        ACC a = {init};
        for (int k = LID(0); k < s; k += LSIZE(0)) {{
            ACC b = TO_ACC(x[row * s + k]);
            a = {combine};
        }}
        red[LID(0)] = a;
        BARRIER();
        for (int w = LSIZE(0) / 2; w > 0; w = w / 2) {{
            if (LID(0) < w) {{
                a = red[LID(0)];
                ACC b = red[LID(0) + w];
                red[LID(0)] = {combine};
            }}
            BARRIER();
        }}
        if (LID(0) == 0) y[row] = FROM_ACC({finish});
        BARRIER();
    }}"""
    return KernelSpec(f"global_pool_{kind}_{elem}", (Param("x", "T", "in"), Param("y", "T", "out"),
                                                      Param("rows", "int", "scalar"), Param("s", "int", "scalar")),
                      body, elem=elem, shared=(("float", "red", _GLOBAL_LOCAL),), local_size=(_GLOBAL_LOCAL,))


class _GlobalPool(Op):
    kind = ""

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, [])
        x = inputs[0]
        if not computes_as_float(x.dtype):
            raise self.error(f"needs a floating-point input, got {x.dtype}")
        if len(x.shape) < 3:
            raise self.error(f"needs an (N, C, spatial...) input, got {x.shape}")
        if any(d == 0 for d in x.shape[2:]):
            raise self.error(f"spatial dims must be non-empty, got {x.shape}")
        return {}

    def infer(self, inputs, attrs):
        x = inputs[0]
        return [TensorType.of(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)]

    def reference(self, inputs, attrs):
        x, dtype = computable(inputs[0]), inputs[0].dtype
        axes = tuple(range(2, x.ndim))
        if self.kind == "max":
            return [np.max(x, axis=axes, keepdims=True).astype(dtype)]
        return [np.mean(x, axis=axes, keepdims=True, dtype=arithmetic(x.dtype)).astype(dtype)]

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        rows = x.shape[0] * x.shape[1]
        s = int(np.prod(x.shape[2:], dtype=np.int64))
        local = _GLOBAL_LOCAL
        if local > min(info.max_work_group_size, info.max_work_item_sizes[0]):
            raise UnsupportedOp(f"{self.name}: needs work-groups of {local}")
        groups = max(1, min(rows, info.max_work_groups[0], 65535))
        return Plan([Launch(_global_spec(self.kind, dialect_type(x.dtype)), (("in", 0), ("out", 0), rows, s),
                            (groups * local,), (local,))])


@register
class GlobalAveragePool(_GlobalPool):
    """global_average_pool(x): mean over every spatial dim, (N, C, 1, ...)."""

    name = "global_average_pool"
    kind = "avg"


@register
class GlobalMaxPool(_GlobalPool):
    """global_max_pool(x): max over every spatial dim, (N, C, 1, ...)."""

    name = "global_max_pool"
    kind = "max"
