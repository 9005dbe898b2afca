"""The steady-state path of a run: NumPy inputs of the types a run just checked go straight to its replay.

A NumPy run of a plan checks every input (names, dtypes, ranks, dimensions),
finds the stage's segment by its signature and the prepared plan by its input
types, then replays the recording.  Serving code calls one plan again and
again with inputs of one type, and on a small model those checks and lookups
cost as much as the model's work.  So after a NumPy run that passed them, the
plan keeps a ``Lane``: the inputs' names, shapes and dtypes as that run saw
them, and the prepared plan it found.  A later run whose inputs are
C-contiguous NumPy arrays (not subclasses) of exactly those names, shapes and
dtypes replays through the lane; any other run (a Tensor, a list, a scalar,
another shape or dtype, a name missing or added, profiling, a graph changed
after compiling, a plan busy in another thread) takes the full path, which
checks and raises as before.  What a lane skips is what the run it was made
after proved for inputs of these types, and nothing else: the replay, the
checks of input values the kernels make, and the naming of a failed node are
the full path's own.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np


def lane_inputs(inputs: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...], np.dtype], ...] | None:
    """The (name, shape, dtype) of each input where every one is a C-contiguous NumPy array (a lane's checks);
    None where one is anything else."""
    checks = []
    for name, x in inputs.items():
        if type(x) is not np.ndarray or not x.flags.c_contiguous:
            return None
        checks.append((name, x.shape, x.dtype))
    return tuple(checks)


class Lane:
    """Runs with inputs of the checked types, replayed by ``replay(feeds)`` (a dict of NumPy outputs by the
    plan's output names, or None where the full path must run); ``outputs`` maps those to the caller's."""

    __slots__ = ("checks", "feeds", "replay", "outputs")

    def __init__(self, checks: Sequence[tuple[str, tuple[int, ...], np.dtype]], feeds: Sequence[tuple[str, int]],
                 replay: Callable[[dict[int, np.ndarray]], dict[str, Any] | None],
                 outputs: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """``checks``: every input's (name, shape, dtype); ``feeds``: (input name, value id) of what the plan
        takes; ``outputs``: the run's result from the plan's outputs (None: those as they are)."""
        self.checks = tuple(checks)
        self.feeds = tuple(feeds)
        self.replay = replay
        self.outputs = outputs

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The outputs of a run on ``inputs``; None where they are not of the lane's types."""
        if len(inputs) != len(self.checks):
            return None
        get = inputs.get
        for name, shape, dtype in self.checks:
            x = get(name)
            if type(x) is not np.ndarray or x.shape != shape or x.dtype != dtype or not x.flags.c_contiguous:
                return None
        produced = self.replay({v_id: inputs[name] for name, v_id in self.feeds})
        if produced is None or self.outputs is None:
            return produced
        return self.outputs(produced)
