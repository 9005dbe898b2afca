"""Image sampling: ``grid_sample`` (ONNX GridSample, 1-3 spatial dims), ``roi_align`` (ONNX RoiAlign),
``deform_conv`` (ONNX DeformConv, 2-D) and ``col2im`` (ONNX Col2Im, 1-3 spatial dims).

Each kernel computes one output element per work item; inputs of fewer than three spatial dims are seen as
3-D with leading extents of 1.  The host references are vectorised NumPy: every interpolation tap is one
gather over all outputs at once.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...dtypes import arithmetic, computes_as_float
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, groups_for, local_1d, register
from .coverage import device_gap
from .movement import int_attr, ints_attr, refuse_unknown
from .reduce import float_attr


def _choice(op: Op, attrs: dict[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    value = attrs.get(name, default)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if value not in allowed:
        raise op.error(f"attribute {name!r} must be one of {list(allowed)}, got {value!r}")
    return value


def _flag(op: Op, attrs: dict[str, Any], name: str) -> int:
    value = int_attr(op, attrs, name, 0)
    if value not in (0, 1):
        raise op.error(f"attribute {name!r} must be 0 or 1, got {value}")
    return value


def _float_input(op: Op, t: TensorType, what: str) -> None:
    if not computes_as_float(t.dtype) or t.dtype.itemsize not in (2, 4, 8):
        raise op.error(f"{what} must be float16, bfloat16, float32 or float64, got {t.dtype}")


def _three(values: Sequence[int], fill: int) -> list[int]:
    """``values`` of 1-3 spatial dims as three, leading ones filled."""
    return [fill] * (3 - len(values)) + [int(v) for v in values]


# -- shared interpolation math (NumPy and dialect) --------------------------------------------------------------
def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` reflected by the borders ``lo`` and ``hi`` until inside them (GridSample's reflection)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, 0))
    turns = np.floor(dx / span)
    r = dx - turns * span
    even = np.mod(turns, 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x))


def _reflect_code(var: str, lo: str, hi: str, indent: str) -> str:
    """Dialect code reflecting ACC ``var`` by the borders ``lo`` and ``hi`` (ACC expressions) until inside."""
    i = indent
    return (f"{i}{{\n{i}    ACC span = {hi} - {lo};\n"
            f"{i}    if (span <= CAST(ACC, 0.0f)) {var} = {lo};\n"
            f"{i}    else if ({var} < {lo} || {var} > {hi}) {{\n"
            f"{i}        bool below = {var} < {lo};\n"
            f"{i}        ACC dx = below ? {lo} - {var} : {var} - {hi};\n"
            f"{i}        ACC turns = dl_floor(dx / span);\n"
            f"{i}        ACC r = dx - turns * span;\n"
            f"{i}        bool even = turns - CAST(ACC, 2.0f) * dl_floor(turns / CAST(ACC, 2.0f)) == CAST(ACC, 0.0f);\n"
            f"{i}        {var} = below == even ? {lo} + r : {hi} - r;\n"
            f"{i}    }}\n{i}}}\n")


_CUBIC_A = -0.75


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for fractions ``t``."""
    a = _CUBIC_A

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_code(t: str, w: str, indent: str) -> str:
    """Dialect code setting ``w[0..3]`` to the cubic weights of fraction ``t``."""
    a = f"CAST(ACC, {_CUBIC_A})"
    near = "((({a} + CAST(ACC, 2.0f)) * ({d}) - ({a} + CAST(ACC, 3.0f))) * ({d}) * ({d}) + CAST(ACC, 1.0f))"
    far = ("(((({a} * ({d}) - CAST(ACC, 5.0f) * {a}) * ({d}) + CAST(ACC, 8.0f) * {a}) * ({d}))"
           " - CAST(ACC, 4.0f) * {a})")
    ds = [f"{t} + CAST(ACC, 1.0f)", t, f"CAST(ACC, 1.0f) - {t}", f"CAST(ACC, 2.0f) - {t}"]
    forms = [far, near, near, far]
    return "".join(f"{indent}{w}[{k}] = {form.format(a=a, d=d)};\n" for k, (form, d) in enumerate(zip(forms, ds)))


# -- grid_sample -------------------------------------------------------------------------------------------------
_MODES = ("linear", "nearest", "cubic")
_PADDINGS = ("zeros", "border", "reflection")
_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


@register
class GridSample(Op):
    """grid_sample(x, grid, mode, padding_mode, align_corners): ONNX GridSample (as PyTorch's grid_sample).

    x (N, C, D1..Dr), grid (N, O1..Or, r) of normalised coordinates in [-1, 1], last axis in reverse order
    (x = the last spatial axis first), r 1 to 3; output (N, C, O1..Or).  mode linear (N-linear), nearest
    (rounding half to even) or cubic (N-cubic, Keys a = -0.75); padding_mode zeros, border or reflection;
    align_corners maps -1 and 1 to the corner pixels' centres (else to their outer edges).
    """

    name = "grid_sample"
    min_inputs = 2
    max_inputs = 2
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["mode", "padding_mode", "align_corners"])
        x, grid = inputs
        _float_input(self, x, "x")
        if grid.dtype != x.dtype:
            raise self.error(f"grid must have x's dtype {x.dtype}, got {grid.dtype}")
        r = len(x.shape) - 2
        if not 1 <= r <= 3:
            raise self.error(f"x must be (N, C, spatial...) with 1 to 3 spatial dims, got {x.shape}")
        if len(grid.shape) != r + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != r:
            raise self.error(f"grid must be (N, out spatial..., {r}) with x's N {x.shape[0]}, got {grid.shape}")
        mode = _choice(self, attrs, "mode", _MODES + ("bilinear", "bicubic"), "linear")
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        return {"mode": mode, "padding_mode": _choice(self, attrs, "padding_mode", _PADDINGS, "zeros"),
                "align_corners": _flag(self, attrs, "align_corners")}

    def infer(self, inputs, attrs):
        x, grid = inputs
        return [TensorType(x.shape[:2] + grid.shape[1:-1], x.dtype)]

    def reference(self, inputs, attrs):
        x, grid = inputs
        ct = arithmetic(x.dtype)
        x, grid = x.astype(ct), grid.astype(ct)
        spatial = x.shape[2:]
        r = len(spatial)
        lead = (np.arange(x.shape[0]).reshape((-1,) + (1,) * r),)
        taps = [_axis_taps(grid[..., r - 1 - a], n, attrs) for a, n in enumerate(spatial)]
        y = np.zeros(grid.shape[:-1] + (x.shape[1],), ct)
        for combo in np.ndindex(*[len(t) for t in taps]):
            weight, valid, index = None, None, []
            for (idx, w, ok) in (t[k] for t, k in zip(taps, combo)):
                weight = w if weight is None else weight * w
                valid = ok if valid is None else valid & ok
                index.append(idx)
            values = x[(lead[0], slice(None), *index)]  # (N, O..., C)
            y += (np.where(valid, weight, 0)[..., None] * values)
        return [np.moveaxis(y, -1, 1).astype(inputs[0].dtype)]

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, inputs, info)

    def plan(self, inputs, outputs, attrs, info):
        x, grid = inputs
        r = len(x.shape) - 2
        elem = dialect_type(x.dtype)
        taps = _TAPS[attrs["mode"]]
        body = _grid_sample_body(r, attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"]))
        names = ("n", "C", "ID", "IH", "IW", "OD", "OH", "OW")
        spec = KernelSpec(f"grid_sample_{elem}_{r}d_{attrs['mode']}_{attrs['padding_mode']}_{attrs['align_corners']}",
                          (Param("x", "T"), Param("grid", "T"), Param("y", "T", "out"),
                           *[Param(nm, "int", "scalar") for nm in names]), body, elem=elem,
                          defines=(("TAPS", taps),))
        n = outputs[0].size
        local = local_1d(info)
        args = (("in", 0), ("in", 1), ("out", 0), n, x.shape[1], *_three(x.shape[2:], 1),
                *_three(outputs[0].shape[2:], 1))
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


def _axis_taps(u: np.ndarray, size: int, attrs: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One spatial axis of a grid sample: for each interpolation tap, the index to read (clipped into range),
    its weight and whether it reads x (zeros padding reads 0 outside)."""
    mode, padding, align = attrs["mode"], attrs["padding_mode"], attrs["align_corners"]
    t = u.dtype.type
    lo, hi = (t(0), t(size - 1)) if align else (t(-0.5), t(size - 0.5))
    xc = (u + 1) / 2 * t(size - 1) if align else ((u + 1) * t(size) - 1) / 2
    if mode == "nearest":
        xc = np.rint(xc)
    outside = (xc < lo) | (xc > hi)
    if padding == "border":
        xc = np.where(outside, np.clip(xc, 0, size - 1), xc)
    elif padding == "reflection":
        xc = np.where(outside, _reflect(xc, lo, hi), xc)
    if mode == "nearest":
        bases, weights = [np.trunc(xc)], [np.ones_like(xc)]
    else:
        x0 = np.floor(xc)
        frac = xc - x0
        offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        bases = [x0 + o for o in offsets]
        weights = [1 - frac, frac] if mode == "linear" else _cubic(frac)
    taps = []
    for base, w in zip(bases, weights):
        if padding == "zeros":
            ok = (base >= 0) & (base < size)
        elif padding == "border":
            base, ok = np.clip(base, 0, size - 1), np.ones(base.shape, bool)
        else:
            base, ok = np.trunc(_reflect(base, lo, hi)), np.ones(base.shape, bool)
        taps.append((np.clip(base, 0, size - 1).astype(np.int64), w, ok))
    return taps


def _grid_sample_body(r: int, mode: str, padding: str, align: bool) -> str:
    """The grid_sample kernel body for ``r`` spatial dims (axes 0-2 are D, H, W; missing leading ones read
    index 0 with weight 1)."""
    lines = ["    FOR_EACH(i, n) {",
             "        int ow = i % OW; int t = i / OW;",
             "        int oh = t % OH; t = t / OH;",
             "        int od = t % OD; t = t / OD;",
             "        int c = t % C; int b = t / C;",
             f"        int g = (((b * OD + od) * OH + oh) * OW + ow) * {r};"]
    for a, (axis, extent) in enumerate(zip("dhw", ("ID", "IH", "IW"))):
        decl = f"        int {axis}i[TAPS]; ACC {axis}w[TAPS]; bool {axis}v[TAPS]; int {axis}n = 1;"
        lines.append(decl)
        if a < 3 - r:
            lines.append(f"        {axis}i[0] = 0; {axis}w[0] = CAST(ACC, 1.0f); {axis}v[0] = true;")
            continue
        E = f"CAST(ACC, {extent})"
        lo, hi = ("CAST(ACC, 0.0f)", f"({E} - CAST(ACC, 1.0f))") if align else \
            ("CAST(ACC, -0.5f)", f"({E} - CAST(ACC, 0.5f))")
        block = [f"        {{\n            ACC u = TO_ACC(grid[g + {2 - a}]);"]
        if align:
            block.append(f"            ACC xc = (u + CAST(ACC, 1.0f)) / CAST(ACC, 2.0f) * ({E} - CAST(ACC, 1.0f));")
        else:
            block.append(f"            ACC xc = ((u + CAST(ACC, 1.0f)) * {E} - CAST(ACC, 1.0f)) / CAST(ACC, 2.0f);")
        if mode == "nearest":
            block.append("            xc = dl_round(xc);")
        if padding == "border":
            block.append(f"            if (xc < {lo} || xc > {hi}) xc = dl_min(dl_max(xc, CAST(ACC, 0.0f)), "
                         f"{E} - CAST(ACC, 1.0f));")
        elif padding == "reflection":
            block.append(_reflect_code("xc", lo, hi, "            ").rstrip("\n"))
        if mode == "nearest":
            block.append("            ACC base = dl_trunc(xc);")
            block.append(f"            {axis}w[0] = CAST(ACC, 1.0f);")
        else:
            block.append("            ACC base = dl_floor(xc);\n            ACC fr = xc - base;")
            if mode == "linear":
                block.append(f"            {axis}w[0] = CAST(ACC, 1.0f) - fr; {axis}w[1] = fr;")
            else:
                block.append("            base = base - CAST(ACC, 1.0f);")
                block.append(_cubic_code("fr", f"{axis}w", "            ").rstrip("\n"))
        block.append(f"            {axis}n = TAPS;")
        block.append("            for (int k = 0; k < TAPS; k++) {")
        block.append("                ACC p = base + CAST(ACC, k);")
        if padding == "zeros":
            block.append(f"                {axis}v[k] = p >= CAST(ACC, 0.0f) && p < {E};")
        else:
            if padding == "border":
                block.append(f"                p = dl_min(dl_max(p, CAST(ACC, 0.0f)), {E} - CAST(ACC, 1.0f));")
            else:
                block.append(_reflect_code("p", lo, hi, "                ").rstrip("\n"))
                block.append("                p = dl_trunc(p);")
            block.append(f"                {axis}v[k] = true;")
        block.append(f"                {axis}i[k] = {axis}v[k] ? CAST(int, p) : 0;")
        block.append("            }\n        }")
        lines += block
    lines += ["        ACC acc = CAST(ACC, 0.0f);",
              "        int base_x = (b * C + c) * ID * IH * IW;",
              "        for (int kd = 0; kd < dn; kd++) {",
              "            if (!dv[kd]) continue;",
              "            for (int kh = 0; kh < hn; kh++) {",
              "                if (!hv[kh]) continue;",
              "                for (int kw = 0; kw < wn; kw++) {",
              "                    if (!wv[kw]) continue;",
              "                    acc = acc + dw[kd] * hw[kh] * ww[kw] * "
              "TO_ACC(x[base_x + (di[kd] * IH + hi[kh]) * IW + wi[kw]]);",
              "                }", "            }", "        }",
              "        y[i] = FROM_ACC(acc);", "    }"]
    return "\n".join(lines)


# -- roi_align -------------------------------------------------------------------------------------------------
@register
class RoiAlign(Op):
    """roi_align(x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
    coordinate_transformation_mode): ONNX RoiAlign.

    x (N, C, H, W), rois (R, 4) as (x1, y1, x2, y2), batch_indices (R,) int64; output (R, C, output_height,
    output_width).  Each bin averages (mode avg) or takes the largest weighted corner of (mode max)
    sampling_ratio x sampling_ratio bilinear samples (0: ceil(roi size / bins) per ROI);
    coordinate_transformation_mode half_pixel shifts the ROI by half a pixel, output_half_pixel (the
    pre-opset-16 behaviour) does not and makes ROIs at least 1 x 1.
    """

    name = "roi_align"
    min_inputs = 3
    max_inputs = 3
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["mode", "output_height", "output_width", "sampling_ratio", "spatial_scale",
                                     "coordinate_transformation_mode"])
        x, rois, idx = inputs
        _float_input(self, x, "X")
        if len(x.shape) != 4:
            raise self.error(f"X must be (N, C, H, W), got {x.shape}")
        if rois.dtype != x.dtype or len(rois.shape) != 2 or rois.shape[1] != 4:
            raise self.error(f"rois must be (R, 4) of X's dtype, got {rois.shape} {rois.dtype}")
        if idx.dtype.kind not in "iu" or idx.shape != rois.shape[:1]:
            raise self.error(f"batch_indices must be integers of shape ({rois.shape[0]},), got {idx.shape} "
                             f"{idx.dtype}")
        out = {"mode": _choice(self, attrs, "mode", ("avg", "max"), "avg"),
               "output_height": int_attr(self, attrs, "output_height", 1),
               "output_width": int_attr(self, attrs, "output_width", 1),
               "sampling_ratio": int_attr(self, attrs, "sampling_ratio", 0),
               "spatial_scale": float_attr(self, attrs, "spatial_scale", 1.0),
               "coordinate_transformation_mode": _choice(self, attrs, "coordinate_transformation_mode",
                                                         ("half_pixel", "output_half_pixel"), "half_pixel")}
        if out["output_height"] < 1 or out["output_width"] < 1 or out["sampling_ratio"] < 0:
            raise self.error("output_height and output_width must be >= 1 and sampling_ratio >= 0, got "
                             f"{out['output_height']}, {out['output_width']}, {out['sampling_ratio']}")
        return out

    def infer(self, inputs, attrs):
        x, rois, _ = inputs
        return [TensorType((rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]), x.dtype)]

    def reference(self, inputs, attrs):
        x, rois, idx = inputs
        ct = arithmetic(x.dtype).type
        x, rois = x.astype(ct), rois.astype(ct)
        N, C, H, W = x.shape
        ph, pw = attrs["output_height"], attrs["output_width"]
        y = np.zeros((rois.shape[0], C, ph, pw), ct)
        half = attrs["coordinate_transformation_mode"] == "half_pixel"
        start_w, start_h, end_w, end_h = (rois * ct(attrs["spatial_scale"]) - ct(0.5 if half else 0.0)).T
        roi_w, roi_h = end_w - start_w, end_h - start_h
        if not half:
            roi_w, roi_h = np.maximum(roi_w, ct(1)), np.maximum(roi_h, ct(1))
        bin_h, bin_w = roi_h / ct(ph), roi_w / ct(pw)
        ratio = attrs["sampling_ratio"]
        grid_h = np.full(len(rois), ratio) if ratio else np.ceil(roi_h / ct(ph)).astype(np.int64)
        grid_w = np.full(len(rois), ratio) if ratio else np.ceil(roi_w / ct(pw)).astype(np.int64)
        usable = (idx >= 0) & (idx < N) & (grid_h >= 1) & (grid_w >= 1)
        pixels = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).reshape(N * H * W, C)  # channels-last rows
        for gh, gw in sorted(set(zip(grid_h[usable].tolist(), grid_w[usable].tolist()))):  # one pass per grid size
            rows = np.flatnonzero(usable & (grid_h == gh) & (grid_w == gw))
            chunk = max(1, (1 << 22) // max(1, ph * pw * gh * gw * 4 * C))  # ROIs per pass: bounded temporaries
            for a in range(0, len(rows), chunk):
                sel = rows[a:a + chunk]
                y[sel] = self._bins(pixels, (H, W), idx[sel], (start_h[sel], bin_h[sel], gh, ph),
                                    (start_w[sel], bin_w[sel], gw, pw), attrs["mode"], ct)
        return [y.astype(inputs[0].dtype)]

    @staticmethod
    def _bins(pixels: np.ndarray, shape: tuple[int, int], images: np.ndarray, rows: tuple, cols: tuple, mode: str,
              ct: Any) -> np.ndarray:
        """The (S, C, ph, pw) bins of S ROIs sharing one sampling grid, from ``pixels`` (every image's pixels as
        rows of C channels); ``rows`` and ``cols`` are (start, bin size, samples per bin, bins) along each axis."""
        H, W = shape

        def samples(start, size, grid, bins):  # (S, bins, grid) positions
            return (start[:, None, None] + np.arange(bins, dtype=ct)[None, :, None] * size[:, None, None]
                    + (np.arange(grid, dtype=ct)[None, None, :] + ct(0.5)) * size[:, None, None] / ct(grid))

        (y0, y1, ly, vy), (x0, x1, lx, vx) = (_bilinear_axis(samples(*rows), H), _bilinear_axis(samples(*cols), W))
        S, ph, gh = y0.shape
        pw, gw = x0.shape[1:]
        tall, wide = (S, ph, 1, gh, 1), (S, 1, pw, 1, gw)  # samples as (S, ph, pw, gh, gw)
        base = images.astype(np.int64).reshape(S, 1, 1, 1, 1) * (H * W)
        ok = vy.reshape(tall) & vx.reshape(wide)
        index, weight = [], []
        for yi, wy in ((y0, 1 - ly), (y1, ly)):
            for xi, wx in ((x0, 1 - lx), (x1, lx)):
                index.append(base + yi.reshape(tall) * W + xi.reshape(wide))
                weight.append(np.where(ok, wy.reshape(tall) * wx.reshape(wide), ct(0)))
        bins = S * ph * pw
        index = np.stack(index, axis=-1).reshape(bins, -1)  # (bins, gh * gw * 4) pixel rows
        weight = np.stack(weight, axis=-1).reshape(bins, -1)
        if mode == "avg":  # each bin: its samples' weights times their pixels, one small product per bin
            out = np.einsum("bk,bkc->bc", weight, pixels[index]) / ct(gh * gw)
        else:  # each sample: the largest of its weighted corners; each bin: the largest sample
            terms = weight[..., None] * pixels[index]
            out = terms.reshape(bins, gh * gw, 4, -1).max(axis=2).max(axis=1)
        return out.reshape(S, ph, pw, -1).transpose(0, 3, 1, 2)

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, inputs, info)

    def plan(self, inputs, outputs, attrs, info):
        x, rois, idx = inputs
        elem = dialect_type(x.dtype)
        it = dialect_type(idx.dtype)
        half = attrs["coordinate_transformation_mode"] == "half_pixel"
        avg = attrs["mode"] == "avg"
        body = f"""    FOR_EACH(i, n) {{
        int pw = i % PW; int t = i / PW;
        int ph = t % PH; t = t / PH;
        int c = t % C; int r = t / C;
        int b = CAST(int, bi[r]);
        ACC res = CAST(ACC, 0.0f);
        if (b >= 0 && b < N) {{
            ACC scale = CAST(ACC, spatial_scale);
            ACC shift = CAST(ACC, {"0.5f" if half else "0.0f"});
            ACC sw = TO_ACC(rois[r * 4]) * scale - shift;
            ACC sh = TO_ACC(rois[r * 4 + 1]) * scale - shift;
            ACC rw = TO_ACC(rois[r * 4 + 2]) * scale - shift - sw;
            ACC rh = TO_ACC(rois[r * 4 + 3]) * scale - shift - sh;
{"" if half else "            rw = dl_max(rw, CAST(ACC, 1.0f)); rh = dl_max(rh, CAST(ACC, 1.0f));"}
            ACC bh = rh / CAST(ACC, PH);
            ACC bw = rw / CAST(ACC, PW);
            int gh = ratio > 0 ? ratio : CAST(int, dl_ceil(rh / CAST(ACC, PH)));
            int gw = ratio > 0 ? ratio : CAST(int, dl_ceil(rw / CAST(ACC, PW)));
            int base = (b * C + c) * H * W;
            bool first = true;
            for (int iy = 0; iy < gh; iy++) {{
                ACC yy = sh + CAST(ACC, ph) * bh + (CAST(ACC, iy) + CAST(ACC, 0.5f)) * bh / CAST(ACC, gh);
                for (int ix = 0; ix < gw; ix++) {{
                    ACC xx = sw + CAST(ACC, pw) * bw + (CAST(ACC, ix) + CAST(ACC, 0.5f)) * bw / CAST(ACC, gw);
                    ACC v = CAST(ACC, 0.0f);
                    if (!(yy < CAST(ACC, -1.0f) || yy > CAST(ACC, H) || xx < CAST(ACC, -1.0f) || xx > CAST(ACC, W))) {{
                        ACC py = dl_max(yy, CAST(ACC, 0.0f));
                        ACC px = dl_max(xx, CAST(ACC, 0.0f));
                        int y0 = CAST(int, py); int x0 = CAST(int, px);
                        int y1 = y0 + 1; int x1 = x0 + 1;
                        if (y0 >= H - 1) {{ y0 = H - 1; y1 = H - 1; py = CAST(ACC, y0); }}
                        if (x0 >= W - 1) {{ x0 = W - 1; x1 = W - 1; px = CAST(ACC, x0); }}
                        ACC ly = py - CAST(ACC, y0); ACC lx = px - CAST(ACC, x0);
                        ACC hy = CAST(ACC, 1.0f) - ly; ACC hx = CAST(ACC, 1.0f) - lx;
                        ACC v1 = hy * hx * TO_ACC(x[base + y0 * W + x0]);
                        ACC v2 = hy * lx * TO_ACC(x[base + y0 * W + x1]);
                        ACC v3 = ly * hx * TO_ACC(x[base + y1 * W + x0]);
                        ACC v4 = ly * lx * TO_ACC(x[base + y1 * W + x1]);
                        v = {"v1 + v2 + v3 + v4" if avg else "dl_max(dl_max(v1, v2), dl_max(v3, v4))"};
                    }}
                    {"res = res + v;" if avg else "res = first ? v : dl_max(res, v); first = false;"}
                }}
            }}
{"            if (gh * gw > 0) res = res / CAST(ACC, gh * gw);" if avg else ""}
        }}
        y[i] = FROM_ACC(res);
    }}"""
        names = ("n", "N", "C", "H", "W", "PH", "PW", "ratio")
        spec = KernelSpec(f"roi_align_{elem}_{it}_{attrs['mode']}_{'half' if half else 'output_half'}",
                          (Param("x", "T"), Param("rois", "T"), Param("bi", it), Param("y", "T", "out"),
                           *[Param(nm, "int", "scalar") for nm in names], Param("spatial_scale", "float", "scalar")),
                          body, elem=elem)
        n = outputs[0].size
        local = local_1d(info)
        args = (("in", 0), ("in", 1), ("in", 2), ("out", 0), n, *x.shape, attrs["output_height"],
                attrs["output_width"], attrs["sampling_ratio"], float(attrs["spatial_scale"]))
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


def _bilinear_axis(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """RoiAlign's bilinear taps along one axis of ``size`` for sample positions ``pos``: low and high index,
    the high tap's weight, and whether the sample lies within [-1, size] (outside it adds 0)."""
    inside = (pos >= -1) & (pos <= size)
    p = np.maximum(pos, 0)
    low = p.astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    p = np.where(edge, low.astype(p.dtype), p)
    low = np.clip(low, 0, size - 1)
    return low, np.clip(high, 0, size - 1), p - low, inside


# -- deform_conv -------------------------------------------------------------------------------------------------
@register
class DeformConv(Op):
    """deform_conv(X, W, offset[, B[, mask]]): ONNX DeformConv over 2 spatial dims.

    Each kernel tap of each output position reads X bilinearly (zeros outside) at its regular position moved
    by its offset ((N, offset_group * kH * kW * 2, oH, oW), (dy, dx) pairs), times its mask ((N,
    offset_group * kH * kW, oH, oW); 1 when absent).  Attributes dilations, group, kernel_shape,
    offset_group, pads, strides as Conv's.
    """

    name = "deform_conv"
    min_inputs = 3
    max_inputs = 5
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["dilations", "group", "kernel_shape", "offset_group", "pads", "strides"])
        x, w, off = inputs[:3]
        _float_input(self, x, "X")
        for t in inputs[1:]:
            if t.dtype != x.dtype:
                raise self.error(f"inputs must share X's dtype {x.dtype}, got {t.dtype}")
        if len(x.shape) != 4 or len(w.shape) != 4:
            raise self.error(f"needs 2-D images: X (N, C, H, W) and W (M, C/group, kH, kW), got {x.shape}, "
                             f"{w.shape}")
        group = int_attr(self, attrs, "group", 1)
        og = int_attr(self, attrs, "offset_group", 1)
        kernel = ints_attr(self, attrs, "kernel_shape", w.shape[2:], length=2)
        strides = ints_attr(self, attrs, "strides", (1, 1), length=2)
        dilations = ints_attr(self, attrs, "dilations", (1, 1), length=2)
        pads = ints_attr(self, attrs, "pads", (0, 0, 0, 0), length=4)
        if group < 1 or og < 1 or min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
            raise self.error("group, offset_group, strides and dilations must be >= 1 and pads >= 0")
        if tuple(kernel) != tuple(w.shape[2:]):
            raise self.error(f"kernel_shape {list(kernel)} does not match W's {list(w.shape[2:])}")
        N, C, H, Wd = x.shape
        M = w.shape[0]
        if C % group or M % group or w.shape[1] * group != C or C % og:
            raise self.error(f"channels do not fit: X has {C}, W {w.shape}, group {group}, offset_group {og}")
        out = [(n + p0 + p1 - d * (k - 1) - 1) // s + 1
               for n, p0, p1, d, k, s in zip((H, Wd), pads[:2], pads[2:], dilations, kernel, strides)]
        kh, kw = kernel
        if off.shape != (N, og * kh * kw * 2, *out):
            raise self.error(f"offset must have shape {(N, og * kh * kw * 2, *out)}, got {off.shape}")
        if len(inputs) >= 4 and inputs[3].shape != (M,):
            raise self.error(f"B must have shape ({M},), got {inputs[3].shape}")
        if len(inputs) == 5 and inputs[4].shape != (N, og * kh * kw, *out):
            raise self.error(f"mask must have shape {(N, og * kh * kw, *out)}, got {inputs[4].shape}")
        return {"group": group, "offset_group": og, "kernel_shape": tuple(kernel), "strides": tuple(strides),
                "dilations": tuple(dilations), "pads": tuple(pads)}

    def infer(self, inputs, attrs):
        x, w, off = inputs[:3]
        return [TensorType((x.shape[0], w.shape[0]) + off.shape[2:], x.dtype)]

    def reference(self, inputs, attrs):
        x, w, off = inputs[:3]
        ct = arithmetic(x.dtype)
        x, w, off = x.astype(ct), w.astype(ct), off.astype(ct)
        N, C, H, Wd = x.shape
        M, Cg, kh, kw = w.shape
        G, OG = attrs["group"], attrs["offset_group"]
        oh, ow = off.shape[2:]
        (sh, sw), (dh, dw), (p0, p1) = attrs["strides"], attrs["dilations"], attrs["pads"][:2]
        off = off.reshape(N, OG, kh, kw, 2, oh, ow)
        py = (np.arange(oh) * sh - p0)[None, None, None, None, :, None] + \
            (np.arange(kh) * dh)[None, None, :, None, None, None] + off[:, :, :, :, 0]
        px = (np.arange(ow) * sw - p1)[None, None, None, None, None, :] + \
            (np.arange(kw) * dw)[None, None, None, :, None, None] + off[:, :, :, :, 1]
        mask = inputs[4].astype(ct).reshape(N, OG, kh, kw, oh, ow) if len(inputs) == 5 else None
        cols = np.zeros((N, C, kh, kw, oh, ow), ct)
        per = C // OG
        bidx = np.arange(N).reshape(N, 1, 1, 1, 1, 1)
        for g in range(OG):
            chans = np.arange(g * per, (g + 1) * per).reshape(1, per, 1, 1, 1, 1)
            y0, x0 = np.floor(py[:, g:g + 1]), np.floor(px[:, g:g + 1])
            for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
                yi, xi = y0 + dy, x0 + dx
                wgt = (1 - np.abs(py[:, g:g + 1] - yi)) * (1 - np.abs(px[:, g:g + 1] - xi))
                ok = (yi >= 0) & (yi < H) & (xi >= 0) & (xi < Wd)
                vals = x[bidx, chans, np.clip(yi, 0, H - 1).astype(np.int64), np.clip(xi, 0, Wd - 1).astype(np.int64)]
                cols[:, g * per:(g + 1) * per] += np.where(ok, wgt, 0) * vals
            if mask is not None:
                cols[:, g * per:(g + 1) * per] *= mask[:, g:g + 1]
        cols = cols.reshape(N, G, Cg * kh * kw, oh * ow)
        y = np.matmul(w.reshape(G, M // G, Cg * kh * kw), cols).reshape(N, M, oh, ow)
        if len(inputs) >= 4:
            y = y + inputs[3].astype(ct).reshape(1, M, 1, 1)
        return [y.astype(inputs[0].dtype)]

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, inputs, info)

    def plan(self, inputs, outputs, attrs, info):
        x, w = inputs[:2]
        elem = dialect_type(x.dtype)
        has_bias, has_mask = len(inputs) >= 4, len(inputs) == 5
        body = f"""    FOR_EACH(i, n) {{
        int ow = i % OW; int t = i / OW;
        int oh = t % OH; t = t / OH;
        int m = t % M; int b = t / M;
        int g = m / (M / G);
        ACC acc = {"TO_ACC(bias[m])" if has_bias else "CAST(ACC, 0.0f)"};
        for (int c = 0; c < CG; c++) {{
            int ic = g * CG + c;
            int og = ic / (C / OG);
            int xbase = (b * C + ic) * H * W;
            for (int ki = 0; ki < KH; ki++) {{
                for (int kj = 0; kj < KW; kj++) {{
                    int tap = (og * KH + ki) * KW + kj;
                    int oi = (b * OG * KH * KW + tap) * 2 * OH * OW + oh * OW + ow;
                    ACC py = CAST(ACC, oh * SH - PH + ki * DH) + TO_ACC(off[oi]);
                    ACC px = CAST(ACC, ow * SW - PW + kj * DW) + TO_ACC(off[oi + OH * OW]);
                    ACC fy = dl_floor(py); ACC fx = dl_floor(px);
                    int y0 = CAST(int, fy); int x0 = CAST(int, fx);
                    ACC ly = py - fy; ACC lx = px - fx;
                    ACC v = CAST(ACC, 0.0f);
                    for (int cy = 0; cy < 2; cy++) {{
                        for (int cx = 0; cx < 2; cx++) {{
                            int yy = y0 + cy; int xx = x0 + cx;
                            if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                            ACC wy = cy == 0 ? CAST(ACC, 1.0f) - ly : ly;
                            ACC wx = cx == 0 ? CAST(ACC, 1.0f) - lx : lx;
                            v = v + wy * wx * TO_ACC(x[xbase + yy * W + xx]);
                        }}
                    }}
{"                    v = v * TO_ACC(mask[(b * OG * KH * KW + tap) * OH * OW + oh * OW + ow]);" if has_mask else ""}
                    acc = acc + TO_ACC(w[((m * CG + c) * KH + ki) * KW + kj]) * v;
                }}
            }}
        }}
        y[i] = FROM_ACC(acc);
    }}"""
        params = [Param("x", "T"), Param("w", "T"), Param("off", "T")]
        params += [Param("bias", "T")] if has_bias else []
        params += [Param("mask", "T")] if has_mask else []
        names = ("n", "M", "G", "CG", "C", "OG", "H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")
        params += [Param("y", "T", "out"), *[Param(nm, "int", "scalar") for nm in names]]
        spec = KernelSpec(f"deform_conv_{elem}{'_bias' if has_bias else ''}{'_mask' if has_mask else ''}",
                          tuple(params), body, elem=elem)
        y = outputs[0]
        n = y.size
        local = local_1d(info)
        args = ([("in", i) for i in range(len(inputs))] + [("out", 0)]
                + [n, w.shape[0], attrs["group"], w.shape[1], x.shape[1], attrs["offset_group"], *x.shape[2:],
                   *y.shape[2:], *attrs["kernel_shape"], *attrs["strides"], *attrs["pads"][:2], *attrs["dilations"]])
        return Plan([Launch(spec, tuple(args), groups_for(n, local, info), (local,))])


# -- col2im ----------------------------------------------------------------------------------------------------
@register
class Col2Im(Op):
    """col2im(x, image_shape, block_shape, dilations, pads, strides): ONNX Col2Im, im2col's adjoint.

    x (N, C * prod(block_shape), L) holds, for each of the L sliding blocks over the padded image (row-major),
    the block's values channel-major; each lands on its image position and overlaps add up.  Output (N, C,
    *image_shape); 1 to 3 spatial dims on devices, any on the host.
    """

    name = "col2im"
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["image_shape", "block_shape", "dilations", "pads", "strides"])
        x = inputs[0]
        if x.dtype.kind not in "fiu":
            raise self.error(f"needs a numeric input, got {x.dtype}")
        image = ints_attr(self, attrs, "image_shape", required=True)
        block = ints_attr(self, attrs, "block_shape", required=True, length=len(image))
        nd = len(image)
        dilations = ints_attr(self, attrs, "dilations", (1,) * nd, length=nd)
        strides = ints_attr(self, attrs, "strides", (1,) * nd, length=nd)
        pads = ints_attr(self, attrs, "pads", (0,) * (2 * nd), length=2 * nd)
        if nd < 1 or min(image) < 1 or min(block) < 1 or min(dilations) < 1 or min(strides) < 1 or min(pads) < 0:
            raise self.error(f"image_shape, block_shape, dilations and strides must be >= 1 and pads >= 0, got "
                             f"{list(image)}, {list(block)}, {list(dilations)}, {list(strides)}, {list(pads)}")
        if len(x.shape) != 3:
            raise self.error(f"x must be (N, C * prod(block_shape), L), got {x.shape}")
        kernel = math.prod(block)
        if x.shape[1] % kernel:
            raise self.error(f"x's dim 1 ({x.shape[1]}) is not a multiple of prod(block_shape) ({kernel})")
        checked = {"image_shape": image, "block_shape": block, "dilations": dilations, "pads": pads,
                   "strides": strides}
        blocks = self._blocks(checked)
        if min(blocks) < 1 or math.prod(blocks) != x.shape[2]:
            raise self.error(f"x has {x.shape[2]} blocks; the image, block and window attributes slide "
                             f"{blocks} = {math.prod(blocks)}")
        return checked

    @staticmethod
    def _blocks(attrs: dict[str, Any]) -> list[int]:
        nd = len(attrs["image_shape"])
        return [(n + attrs["pads"][i] + attrs["pads"][nd + i] - attrs["dilations"][i] * (k - 1) - 1)
                // attrs["strides"][i] + 1
                for i, (n, k) in enumerate(zip(attrs["image_shape"], attrs["block_shape"]))]

    def infer(self, inputs, attrs):
        x = inputs[0]
        return [TensorType((x.shape[0], x.shape[1] // math.prod(attrs["block_shape"]), *attrs["image_shape"]),
                           x.dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        image, block, d, s, p = (attrs[k] for k in ("image_shape", "block_shape", "dilations", "strides", "pads"))
        nd = len(image)
        blocks = self._blocks(attrs)
        N, C = x.shape[0], x.shape[1] // math.prod(block)
        ct = arithmetic(x.dtype)
        cols = x.astype(ct).reshape(N, C, math.prod(block), *blocks)
        full = np.zeros((N, C) + tuple(n + p[i] + p[nd + i] for i, n in enumerate(image)), ct)
        for j, kpos in enumerate(np.ndindex(*block)):
            where = tuple(slice(k * dd, k * dd + st * (nb - 1) + 1, st) for k, dd, st, nb in zip(kpos, d, s, blocks))
            full[(slice(None), slice(None)) + where] += cols[:, :, j]
        inner = tuple(slice(p[i], p[i] + n) for i, n in enumerate(image))
        return [np.ascontiguousarray(full[(slice(None), slice(None)) + inner]).astype(x.dtype)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python" and len(attrs["image_shape"]) > 3:
            return f"{self.name}: kernels take 1 to 3 spatial dims, got {len(attrs['image_shape'])}"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        nd = len(attrs["image_shape"])
        elem = dialect_type(x.dtype)
        pads = attrs["pads"]
        body = """    FOR_EACH(i, n) {
        int w = i % IW; int t = i / IW;
        int h = t % IH; t = t / IH;
        int d = t % ID; int nc = t / ID;
        int KS = KD * KH * KW;
        int L = BD * BH * BW;
        ACC acc = CAST(ACC, 0.0f);
        for (int kd = 0; kd < KD; kd++) {
            int td = d + PD - kd * DD;
            if (td < 0 || td % SD != 0 || td / SD >= BD) continue;
            for (int kh = 0; kh < KH; kh++) {
                int th = h + PH - kh * DH;
                if (th < 0 || th % SH != 0 || th / SH >= BH) continue;
                for (int kw = 0; kw < KW; kw++) {
                    int tw = w + PW - kw * DW;
                    if (tw < 0 || tw % SW != 0 || tw / SW >= BW) continue;
                    int k = (kd * KH + kh) * KW + kw;
                    int blk = ((td / SD) * BH + th / SH) * BW + tw / SW;
                    acc = acc + TO_ACC(x[(nc * KS + k) * L + blk]);
                }
            }
        }
        y[i] = FROM_ACC(acc);
    }"""
        names = ("n", "ID", "IH", "IW", "KD", "KH", "KW", "BD", "BH", "BW", "PD", "PH", "PW", "SD", "SH", "SW",
                 "DD", "DH", "DW")
        spec = KernelSpec(f"col2im_{elem}", (Param("x", "T"), Param("y", "T", "out"),
                                             *[Param(nm, "int", "scalar") for nm in names]), body, elem=elem)
        n = outputs[0].size
        local = local_1d(info)
        args = (("in", 0), ("out", 0), n, *_three(attrs["image_shape"], 1), *_three(attrs["block_shape"], 1),
                *_three(self._blocks(attrs), 1), *_three(pads[:nd], 0), *_three(attrs["strides"], 1),
                *_three(attrs["dilations"], 1))
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


__all__ = ["GridSample", "RoiAlign", "DeformConv", "Col2Im"]
