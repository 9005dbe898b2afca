"""Reports of a plan over a cluster: placement with cross-node transfers, memory per device, profiles merged
into one timeline (one track per node and device, and one per node for the data it receives)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..graph.placement import placement_lines


def placement_text(rows: Sequence[Mapping[str, str]], moves: Sequence[Mapping[str, Any]],
                   last: Mapping[str, Any] | None) -> str:
    """The placement table, device counts, and the transfers between nodes (count, bytes, last run's time)."""
    lines, counts = placement_lines(rows, device_width=6)
    nodes = sorted({r["device"].split("/", 1)[0] for r in rows})
    cross = [m for m in moves if m["kind"] == "cross-node"]
    feeds = [m for m in moves if m["kind"] == "input"]
    outs = [m for m in moves if m["kind"] == "output"]
    lines.append(f"{len(rows)} nodes on {len(nodes)} cluster node(s) "
                 f"({', '.join(f'{d}: {c}' for d, c in counts.items())})")
    lines.append(f"{len(cross)} cross-node transfer(s) per run, {sum(m['bytes'] for m in cross)} bytes; "
                 f"inputs in: {sum(m['bytes'] for m in feeds)} bytes, outputs out: {sum(m['bytes'] for m in outs)} "
                 "bytes")
    for m in cross:
        lines.append(f"  {m['value']}: {m['source']} -> {m['target']}, {m['bytes']} bytes")
    if last:
        lines.append(f"last run: {last['seconds'] * 1e3:.2f} ms; bringing inputs to the nodes took "
                     f"{last['fetch_seconds'] * 1e3:.2f} ms in all")
    return "\n".join(lines)


def merged_memory(reports: Sequence[tuple[str, Mapping[str, Mapping[str, int]]]]) -> dict[str, dict[str, int]]:
    """Per node-qualified device, the memory reports of every part it holds, added up."""
    out: dict[str, dict[str, int]] = {}
    for node, report in reports:
        for dev, figures in report.items():
            entry = out.setdefault(f"{node}/{dev}", {k: 0 for k in figures})
            for k, v in figures.items():
                entry[k] = entry.get(k, 0) + v
    return out


def timeline(parts: Sequence[Mapping[str, Any]], t0: float) -> list[dict[str, Any]]:
    """One profile (``plan.last_profile``'s form) from every part's stats of one run: each part's nodes on
    ``<node>/<device>``, and the fetch of its inputs on ``<node>/network``; times from the run's start ``t0``
    (wall clock, so nodes on other hosts are as close as their clocks)."""
    records: list[dict[str, Any]] = []
    for part in parts:
        stats = part["stats"]
        begin = stats["start"] - t0
        if stats["bytes"]:
            records.append({"node": f"inputs of {part['first']} ({sum(stats['bytes'])} B)", "op": "transfer",
                            "device": f"{part['node']}/network", "submitted": begin, "host_us": 0.0,
                            "start": begin + stats["waited"], "device_us": stats["fetched"] * 1e6})
        for r in stats.get("profile") or ():
            shift = begin + stats["run_start"]
            records.append({**r, "device": f"{part['node']}/{r['device']}", "submitted": r["submitted"] + shift,
                            "start": r["start"] + shift})
    return records
