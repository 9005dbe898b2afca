"""What went wrong on which node: Ray's errors turned into devicelayer's, naming the node and the graph node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import DeviceLayerError, GraphError, NodeError
from .engine import exceptions, ray


@dataclass
class Call:
    """One actor call of a run or a compile: the node, the graph node its part starts at, and the reference
    that is ready when the call has finished."""

    node: str
    op: str
    done: Any  # an ObjectRef


def innermost(error: BaseException) -> BaseException:
    """The error a chain of Ray task errors started with."""
    errors = exceptions()
    while isinstance(error, errors.RayTaskError) and getattr(error, "cause", None) is not None:
        error = error.cause
    return error


def translate(call: Call, error: BaseException, what: str) -> DeviceLayerError:
    """The devicelayer error for ``error``, raised by ``call`` while doing ``what`` ("running", "compiling")."""
    errors = exceptions()
    cause = innermost(error)
    where = f"node {call.node}"
    if isinstance(cause, DeviceLayerError):  # the device layer of that node refused or failed: same type
        try:
            translated = type(cause)(f"{where}: {cause}")
        except Exception:  # noqa: BLE001 - an error type of another signature
            translated = GraphError(f"{where}: {cause}")
        if isinstance(translated, NodeError):
            translated.node, translated.op = call.node, call.op
        translated.__cause__ = cause
        return translated
    lost = (errors.RayActorError, errors.ObjectLostError, errors.WorkerCrashedError, errors.NodeDiedError)
    if isinstance(cause, lost) or isinstance(error, lost):
        return NodeError(f"{where} died (or its devicelayer actor did) while {what} the part of the plan from "
                         f"{call.op!r}: {_first_line(cause)}", node=call.node, op=call.op)
    return NodeError(f"{where}: {what} the part of the plan from {call.op!r} failed: {type(cause).__name__}: "
                     f"{_first_line(cause)}", node=call.node, op=call.op)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def gather(calls: Sequence[Call], refs: Sequence[Any], timeout: float | None, what: str) -> list[Any]:
    """``ray.get(refs)`` within ``timeout`` seconds; a failure or time-out raised as a devicelayer error naming the
    first call (in order) that failed or has not finished."""
    r, errors = ray(), exceptions()
    try:
        return r.get(list(refs), timeout=timeout)
    except errors.GetTimeoutError:
        raise _culprit(calls, timeout, what) from None
    except errors.RayError as exc:
        raise _culprit(calls, None, what, exc) from None


def _dead(calls: Sequence[Call]) -> set[str]:
    """The nodes of ``calls`` that the cluster no longer counts as alive (a surviving node's call may fail first,
    on an object the dead one held: the dead node is the one to name)."""
    try:
        alive = [n["NodeID"] for n in ray().nodes() if n.get("Alive")]
    except Exception:  # noqa: BLE001 - no answer from the cluster: nothing to add to what the calls say
        return set()
    return {c.node for c in calls if not any(i.startswith(c.node) for i in alive)}


def _culprit(calls: Sequence[Call], timeout: float | None, what: str,
             error: BaseException | None = None) -> DeviceLayerError:
    r, errors = ray(), exceptions()
    dead = _dead(calls)
    for call in calls:
        if call.node in dead:
            return NodeError(f"node {call.node} died (or left the cluster) while {what} the part of the plan from "
                             f"{call.op!r}", node=call.node, op=call.op)
    for call in calls:
        ready, _ = r.wait([call.done], num_returns=1, timeout=0, fetch_local=False)
        if not ready:
            if timeout is not None:
                return _timed_out(NodeError(f"node {call.node}: {what} the part of the plan from {call.op!r} did "
                                            f"not finish within {timeout:g} s", node=call.node, op=call.op))
            continue
        try:
            r.get(call.done, timeout=0)
        except errors.GetTimeoutError:
            continue
        except Exception as exc:  # noqa: BLE001 - this call is the one that failed
            return translate(call, exc, what)
    call = calls[0] if calls else Call("?", "?", None)
    if error is not None:
        return translate(call, error, what)
    return _timed_out(NodeError(f"{what} did not finish within {timeout:g} s", node=call.node, op=call.op))


def _timed_out(error: NodeError) -> NodeError:
    error.timed_out = True  # the node may still answer: what it holds is not lost
    return error
