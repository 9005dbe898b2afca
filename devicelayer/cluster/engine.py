"""Ray, the distributed engine under the cluster layer: the one place it is imported, with the install hint."""

from __future__ import annotations

from typing import Any

from ..errors import BackendUnavailable

#: how to get what the cluster layer needs
INSTALL_HINT = "pip install 'devicelayer[cluster]'"


def ray() -> Any:
    """The ``ray`` module; BackendUnavailable (with the install hint) where it cannot be imported."""
    try:
        import ray as module
    except ImportError as exc:
        raise BackendUnavailable(f"devicelayer.cluster runs on Ray, which cannot be imported here ({exc}); "
                                 f"{INSTALL_HINT}") from None
    return module


def exceptions() -> Any:
    """``ray.exceptions``."""
    ray()
    import ray.exceptions as module

    return module


def on_node(node_id: str) -> Any:
    """The scheduling strategy that keeps an actor on the node ``node_id`` (never elsewhere)."""
    ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)
