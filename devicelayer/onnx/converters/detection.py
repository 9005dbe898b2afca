"""NonMaxSuppression: its output's length depends on the data, so it runs on the host (``Context.on_host``,
and when the loader folds it) as vectorised NumPy with ONNX Runtime's arithmetic (float32 corners and areas,
suppression where IoU > iou_threshold, candidates where score > score_threshold, ties to the lower index)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import GraphError
from ..loader import Context
from .base import FOLDERS, Tensor, converter


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(..., 4) boxes as float32 (x_min, y_min, x_max, y_max)."""
    b = boxes.astype(np.float32)
    if center_point_box:
        half_w, half_h = b[..., 2] / np.float32(2), b[..., 3] / np.float32(2)
        return np.stack([b[..., 0] - half_w, b[..., 1] - half_h, b[..., 0] + half_w, b[..., 1] + half_h], -1)
    return np.stack([np.minimum(b[..., 1], b[..., 3]), np.minimum(b[..., 0], b[..., 2]),
                     np.maximum(b[..., 1], b[..., 3]), np.maximum(b[..., 0], b[..., 2])], -1)


def _suppressed(chosen: np.ndarray, others: np.ndarray, iou_threshold: np.float32) -> np.ndarray:
    """Which of ``others`` (P, N, 4 corners) overlap ``chosen`` (P, 4) by an IoU above the threshold."""
    a = chosen[:, None, :]
    x0, y0 = np.maximum(a[..., 0], others[..., 0]), np.maximum(a[..., 1], others[..., 1])
    x1, y1 = np.minimum(a[..., 2], others[..., 2]), np.minimum(a[..., 3], others[..., 3])
    inter = (x1 - x0) * (y1 - y0)
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (others[..., 2] - others[..., 0]) * (others[..., 3] - others[..., 1])
    union = area_a + area_b - inter
    overlap = (x1 > x0) & (y1 > y0) & (inter > 0) & (area_a > 0) & (area_b > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return overlap & (inter / np.where(union > 0, union, np.float32(1)) > iou_threshold)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output: int, iou_threshold: float,
                        score_threshold: float | None, center_point_box: int = 0) -> np.ndarray:
    """ONNX NonMaxSuppression: (selected, 3) int64 rows (batch, class, box), by batch, class, then score.

    Greedy per (batch, class) pair, all pairs at once: each round selects every pair's best remaining candidate
    and removes the candidates it overlaps, so the rounds number the most boxes one pair selects."""
    batches, classes, n = scores.shape
    if boxes.shape != (batches, n, 4):
        raise GraphError(f"NonMaxSuppression boxes {boxes.shape} and scores {scores.shape} disagree "
                         "(boxes must be (batches, boxes, 4), scores (batches, classes, boxes))")
    if not 0 <= iou_threshold <= 1:
        raise GraphError(f"NonMaxSuppression iou_threshold must lie in [0, 1], got {iou_threshold}")
    if max_output <= 0 or n == 0 or classes == 0:
        return np.zeros((0, 3), np.int64)
    s = scores.astype(np.float32).reshape(batches * classes, n)
    order = np.argsort(-s, axis=1, kind="stable")  # best first, ties to the lower index
    alive = np.ones_like(s, dtype=bool) if score_threshold is None else \
        np.take_along_axis(s, order, 1) > np.float32(score_threshold)
    corners = _corners(boxes, center_point_box)  # (batches, n, 4)
    pair_batch = np.repeat(np.arange(batches), classes)
    cand = corners[pair_batch[:, None], order]  # (pairs, n, 4) in each pair's order
    picked: list[tuple[np.ndarray, np.ndarray]] = []
    active = np.flatnonzero(alive.any(axis=1))
    threshold = np.float32(iou_threshold)
    for _ in range(min(max_output, n)):
        if not active.size:
            break
        first = np.argmax(alive[active], axis=1)
        picked.append((active, order[active, first]))
        chosen = cand[active, first]
        alive[active] &= ~_suppressed(chosen, cand[active], threshold)
        alive[active, first] = False
        active = active[alive[active].any(axis=1)]
    if not picked:
        return np.zeros((0, 3), np.int64)
    pairs = np.concatenate([p for p, _ in picked])
    chosen_boxes = np.concatenate([b for _, b in picked])
    rounds = np.concatenate([np.full(len(p), r) for r, (p, _) in enumerate(picked)])
    keep = np.lexsort((rounds, pairs))
    pairs, chosen_boxes = pairs[keep], chosen_boxes[keep]
    return np.stack([pairs // classes, pairs % classes, chosen_boxes], axis=1).astype(np.int64)


def _scalar(x: np.ndarray | None, default: Any) -> Any:
    return default if x is None or np.asarray(x).size == 0 else np.asarray(x).reshape(-1)[0].item()


def _nms(arrays: Sequence[np.ndarray | None], center_point_box: int) -> list[np.ndarray]:
    boxes, scores, max_output, iou, score = (list(arrays) + [None] * 5)[:5]
    if boxes is None or scores is None or boxes.ndim != 3 or scores.ndim != 3:
        raise GraphError("NonMaxSuppression needs 3-D boxes and scores")
    return [non_max_suppression(boxes, scores, int(_scalar(max_output, 0)), float(_scalar(iou, 0.0)),
                                None if score is None else float(_scalar(score, 0.0)), center_point_box)]


def _center_point_box(attrs: dict[str, Any]) -> int:
    value = int(attrs.get("center_point_box", 0))
    if value not in (0, 1):
        raise GraphError(f"center_point_box must be 0 or 1, got {value}")
    return value


@converter("NonMaxSuppression")
def _non_max_suppression(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    present = [i for i in range(len(ctx.node.input)) if ctx.has(i)]
    box = _center_point_box(attrs)

    def run(values: list[np.ndarray]) -> list[np.ndarray]:
        arrays: list[np.ndarray | None] = [None] * 5
        for i, v in zip(present, values):
            arrays[i] = v
        return _nms(arrays, box)
    return ctx.on_host(run, [ctx.raw(i) for i in present], "NonMaxSuppression")


FOLDERS["NonMaxSuppression"] = lambda ctx, attrs, ins: _nms(ins, _center_point_box(attrs))
