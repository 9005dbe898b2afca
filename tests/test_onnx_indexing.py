"""ONNX converters of the reductions, scans, selection, indexing and scatter ops against onnxruntime (and ONNX's
node suite) on every device, and their misuse."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from onnx import helper, numpy_helper

import devicelayer as dl
from devicelayer.onnx.backend import backend_for
from devicelayer.onnx.testing import make_model, onnxruntime_run

# -- ONNX's node suite with the parameter inputs frozen ---------------------------------------------------------
#: op type -> inputs that are parameters (read with ``need_const``): the node suite feeds them as graph inputs,
#: which devicelayer takes once plans are specialised per parameter value
PARAMETERS = {**{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                     "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "TopK",
                                     "CumSum", "CumProd", "OneHot", "Trilu", "CenterCropPad", "Compress",
                                     "Reshape", "Unsqueeze", "Squeeze", "Expand", "Split", "Tile")},
              "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4)}
#: the node-suite cases of this family whose parameters are graph inputs
FROZEN_PATTERN = (r"^test_(reduce|top_k|cumsum|cumprod|onehot|tril|triu|center_crop_pad|compress)")


def frozen_case(case):
    """``case`` with every graph input that some node reads as a parameter made an initializer of its value."""
    model = case.model.__class__.FromString(case.model.SerializeToString())
    g = model.graph
    params = {n.input[i] for n in g.node for i in PARAMETERS.get(n.op_type, ()) if i < len(n.input)}
    names = [vi.name for vi in g.input if vi.name not in {i.name for i in g.initializer}]
    frozen = [k for k, name in enumerate(names) if name in params]
    if not frozen:
        return case
    inputs0 = case.data_sets[0][0]
    for k in frozen:
        g.initializer.append(numpy_helper.from_array(np.asarray(inputs0[k]), names[k]))
    keep = [vi for vi in g.input if vi.name not in {names[k] for k in frozen}]
    del g.input[:]
    g.input.extend(keep)
    data_sets = [([x for k, x in enumerate(ins) if k not in frozen], refs) for ins, refs in case.data_sets]
    return dataclasses.replace(case, model=model, data_sets=data_sets)


def _frozen_cases():
    from devicelayer.onnx.conformance import node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_cases(FROZEN_PATTERN)
