"""ONNX NonMaxSuppression: the host computation (vectorised over batch and class pairs) against onnxruntime on
random boxes (both box formats, thresholds given or not, ties, many classes), the node suite's cases, and the
misuse cases.  Its output's length depends on the data: it runs on the host whenever its inputs are known."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.onnx.converters.detection import non_max_suppression  # noqa: E402
from devicelayer.onnx.testing import make_model, onnxruntime_run  # noqa: E402


def _random_case(rng, batches, classes, n, center):
    xy = rng.uniform(0, 10, (batches, n, 2)).astype(np.float32)
    wh = rng.uniform(0.5, 4, (batches, n, 2)).astype(np.float32)
    if center:
        boxes = np.concatenate([xy, wh], -1)
    else:  # [y1, x1, y2, x2], corners in either order
        flip = rng.random((batches, n, 1)) < 0.3
        a, b = np.concatenate([xy[..., ::-1], xy[..., ::-1] + wh[..., ::-1]], -1).reshape(batches, n, 2, 2).transpose(
            2, 0, 1, 3)
        boxes = np.where(flip, np.concatenate([b, a], -1), np.concatenate([a, b], -1)).astype(np.float32)
    scores = rng.choice(np.linspace(0.05, 0.95, 12), (batches, classes, n)).astype(np.float32)  # many ties
    return boxes, scores


def _onnxruntime(boxes, scores, max_output, iou, score, center):
    feeds = {"boxes": boxes, "scores": scores, "max_output": np.array([max_output], np.int64),
             "iou": np.array([iou], np.float32)}
    names = ["boxes", "scores", "max_output", "iou"]
    if score is not None:
        feeds["score"], names = np.array([score], np.float32), names + ["score"]
    node = helper.make_node("NonMaxSuppression", names, ["y"], center_point_box=int(center))
    return onnxruntime_run(make_model([node], feeds, ["y"], opset=11), feeds)["y"], node, feeds


@pytest.mark.parametrize("batches, classes, n, center, max_output, iou, score", [
    (1, 1, 30, False, 10, 0.5, None),
    (2, 3, 50, False, 100, 0.3, 0.4),
    (3, 2, 40, True, 5, 0.6, 0.2),
    (1, 4, 200, True, 1000, 0.0, None),
    (2, 1, 25, False, 3, 1.0, 0.9),
])
def test_matches_onnxruntime(batches, classes, n, center, max_output, iou, score):
    rng = np.random.default_rng(batches * 100 + n)
    boxes, scores = _random_case(rng, batches, classes, n, center)
    want, node, feeds = _onnxruntime(boxes, scores, max_output, iou, score, center)
    got = non_max_suppression(boxes, scores, max_output, iou, score, int(center))
    np.testing.assert_array_equal(got, want)
    # the same through the loader, every input a constant (evaluated at load time)
    model = make_model([node], {}, ["y"], feeds, opset=11)
    np.testing.assert_array_equal(dlo.load(model).compile(["host"])()["y"], want)


def test_no_boxes_selected_without_max_output():
    rng = np.random.default_rng(0)
    boxes, scores = _random_case(rng, 1, 2, 10, False)
    assert non_max_suppression(boxes, scores, 0, 0.5, None).shape == (0, 3)
    assert non_max_suppression(boxes, scores, 5, 0.5, 2.0).shape == (0, 3)


@pytest.fixture(scope="module")
def suite():
    from devicelayer.onnx.conformance import node_cases

    return node_cases(r"^test_nonmaxsuppression")


def test_node_suite_cases_with_constant_inputs(suite):
    assert len(suite) == 10
    for case in suite:
        model = onnx.ModelProto.FromString(case.model.SerializeToString())
        inputs, outputs = case.data_sets[0]
        for vi, value in zip(model.graph.input, inputs):
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), vi.name))
        del model.graph.input[:]
        got = dlo.load(model).compile(["host"])()
        np.testing.assert_array_equal(next(iter(got.values())), np.asarray(outputs[0]), err_msg=case.name)


@pytest.mark.parametrize("boxes_shape, scores_shape, attrs, iou, match", [
    ((1, 6, 4), (1, 2, 5), {}, 0.5, "disagree"),
    ((1, 6, 4), (1, 2, 6), {"center_point_box": 2}, 0.5, "center_point_box"),
    ((1, 6, 4), (1, 2, 6), {}, 1.5, "iou_threshold"),
])
def test_misuse_names_the_node(boxes_shape, scores_shape, attrs, iou, match):
    inits = {"boxes": np.ones(boxes_shape, np.float32), "scores": np.ones(scores_shape, np.float32),
             "m": np.array([3], np.int64), "iou": np.array([iou], np.float32)}
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou"], ["y"], name="bad_nms", **attrs)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.INT64, ["?", 3])],
                              [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    with pytest.raises(dl.GraphError, match=f"bad_nms.*{match}"):
        dlo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]))
