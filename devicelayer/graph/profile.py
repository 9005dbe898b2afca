"""Profiles of a run: a Chrome/Perfetto trace (one track per device) and a Gantt picture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence


def chrome_trace(profile: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``profile`` (``plan.last_profile``) as a Chrome trace-event JSON, one track (pid) per device."""
    path = Path(path)
    path.write_text(json.dumps(trace_document(profile)))
    return path


def trace_document(profile: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``profile`` (``plan.last_profile``) as a Chrome trace-event document, one track (pid) per device."""
    devices = list(dict.fromkeys(r["device"] for r in profile))
    events: list[dict[str, Any]] = []
    for pid, dev in enumerate(devices, start=1):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": dev}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "device"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "host submit"}})
    for r in profile:
        pid = devices.index(r["device"]) + 1
        events.append({"ph": "X", "name": r["node"], "cat": r["op"], "pid": pid, "tid": 1,
                       "ts": r["start"] * 1e6, "dur": max(r["device_us"], 0.01),
                       "args": {"op": r["op"], "host_us": round(r["host_us"], 2)}})
        events.append({"ph": "X", "name": f"submit {r['node']}", "cat": "host", "pid": pid, "tid": 2,
                       "ts": r["submitted"] * 1e6, "dur": max(r["host_us"], 0.01)})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def gantt(profile: Sequence[dict[str, Any]], path: str | Path, title: str = "devicelayer run") -> Path:
    """Draw ``profile`` as a Gantt chart PNG: one row per device, one bar per node (needs matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # optional dependency
        raise ImportError("the Gantt picture needs matplotlib: pip install 'devicelayer[plot]'") from exc
    devices = list(dict.fromkeys(r["device"] for r in profile))
    ops = sorted({r["op"] for r in profile})
    colors = {op: plt.get_cmap("tab20")(i % 20) for i, op in enumerate(ops)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.7 * len(devices)))
    for r in profile:
        row = devices.index(r["device"])
        ax.barh(row, r["device_us"] / 1e3, left=r["start"] * 1e3, height=0.6, color=colors[r["op"]],
                edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(devices)), devices)
    ax.invert_yaxis()
    ax.set_xlabel("time since the run started (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[o]) for o in ops]
    ax.legend(handles, ops, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(8, len(ops)), fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class Profiled:
    """``trace``/``gantt`` of a plan's last profiled run (``self.last_profile``), for every kind of plan."""

    last_profile: list
    #: the Gantt picture's default title
    gantt_title = "devicelayer run"

    def trace(self, path: Any) -> Any:
        """Write the last profiled run (``plan(..., profile=True)``) as a Chrome/Perfetto trace JSON."""
        return chrome_trace(self._profile(), path)

    def gantt(self, path: Any, title: str | None = None) -> Any:
        """Draw the last profiled run as a Gantt PNG, one row per device (per node and device on a cluster)."""
        return gantt(self._profile(), path, self.gantt_title if title is None else title)

    def _profile(self) -> list:
        from ..errors import GraphError

        if not self.last_profile:
            raise GraphError("no profile yet: run the plan with profile=True first")
        return self.last_profile
