"""The misuse catalogue (``CATALOGUE``), one module of cases per area of the public API."""

from . import (commands, events, forks, graphs, interface, interop, onnx_models, programs,  # noqa: F401
               sessions, transfers)  # (register cases)
from .catalogue import AREAS, CATALOGUE, GRAPH_AREAS, Misuse, Scratch, assert_no_leak, graph_works, live_buffers, \
    still_works, table

__all__ = ["AREAS", "CATALOGUE", "GRAPH_AREAS", "Misuse", "Scratch", "assert_no_leak", "graph_works", "live_buffers",
           "still_works", "table"]
