"""The exception hierarchy: every error devicelayer raises derives from DeviceLayerError."""

from __future__ import annotations


class DeviceLayerError(Exception):
    """Base of every error raised by devicelayer."""


class BackendUnavailable(DeviceLayerError):
    """A backend (or a device of it) cannot be used here; the message says why."""


class OutOfMemory(DeviceLayerError, MemoryError):
    """An allocation could not be satisfied by the pool."""


class CompileError(DeviceLayerError):
    """A kernel failed to compile; ``log`` holds the backend's build log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(f"{message}\n{log}".rstrip() if log else message)
        self.log = log


class LaunchError(DeviceLayerError):
    """A kernel launch or a device operation failed."""


class InvalidArgument(DeviceLayerError, ValueError):
    """A call got arguments it cannot accept (sizes, dtypes, counts, freed or foreign buffers)."""


class DeviceNotFound(InvalidArgument, LookupError):
    """No device has the requested id."""


class EventError(DeviceLayerError):
    """An event failed, or one it depends on failed; the cause is chained."""


class EventTimeout(EventError, TimeoutError):
    """``Event.wait(timeout=...)`` ran out of time before the work completed."""


class GraphError(DeviceLayerError):
    """A graph is malformed or could not be planned or run."""


class NodeError(GraphError):
    """A node of a cluster (a machine and the actor owning its devices) died, failed or did not answer in time
    while running part of a plan; ``node`` names it and ``op`` the graph node its part starts at."""

    def __init__(self, message: str, node: str = "", op: str = "") -> None:
        super().__init__(message)
        self.node = node
        self.op = op

    def __reduce__(self) -> tuple:
        return (type(self), (str(self), self.node, self.op))


class UnsupportedOp(DeviceLayerError):
    """An op (or an op with these dtypes) is not supported where it was asked to run."""


class DLPackError(InvalidArgument, BufferError):
    """Memory cannot be exchanged through DLPack as asked; the message says how to copy it instead.

    A ``BufferError`` too, as the DLPack protocol expects of a producer that cannot export.
    """


class CopyWarning(UserWarning):
    """An exchange that could have shared memory copied it (a device or layout the consumer cannot take)."""
