"""--profile DIR: a few training steps after the timed ones, traced with tf.profiler, and what
took the time: the op types by self-time, on the device (the GPU) and on the host, as TensorFlow's
own profiler tool (framework_op_stats, TensorBoard's "TF op stats") reads the trace. The trace
stays in DIR for TensorBoard. TensorFlow releases whose profiler has no such tool (2.13) keep only
the trace, and the report says so.
"""

from __future__ import annotations

import glob
import json
import os
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

PROFILED_STEPS = 5
TOP = 12


def profile(tf: ModuleType, folder: str, train: Any, steps: int) -> Dict[str, Any]:
    """Trace `train(steps)` into folder; the op types that took the most self-time."""
    os.makedirs(folder, exist_ok=True)
    tf.profiler.experimental.start(folder)
    try:
        train(steps)
    finally:
        tf.profiler.experimental.stop()
    top, error = top_op_types(folder)
    return {"folder": folder, "steps": steps, "top": top, "error": error}


def _plugin() -> Any:
    try:
        from tensorflow.python.profiler.internal import (
            _pywrap_profiler_plugin as plugin,
        )
    except ImportError:
        from tensorflow.python.profiler.internal import (
            _pywrap_profiler as plugin,
        )
    return plugin


def top_op_types(folder: str) -> Tuple[List[Dict[str, Any]], Optional[str]]:
    """[{"where": "Device"|"Host", "type", "self_ms", "percent", "occurrences"}], by self-time,
    the first TOP of each side; or [] and why not."""
    paths = sorted(glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        return [], "the profiler wrote no trace"
    try:
        data, ok = _plugin().xspace_to_tools_data(paths, "framework_op_stats", {})
    except Exception as exc:
        return [], f"reading the trace: {type(exc).__name__}: {exc}"[:300]
    if not ok:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        return [], (
            "this TensorFlow's profiler cannot summarise its trace "
            f"({text.strip()[:150] or 'no framework_op_stats tool'}); open it in TensorBoard"
        )
    tables = json.loads(data)
    table = tables[-1]  # the last one leaves idle time out
    ids = [c["id"] for c in table["cols"]]
    totals: Dict[Tuple[str, str], List[float]] = {}
    for row in table["rows"]:
        v = dict(zip(ids, (c.get("v") for c in row["c"])))
        if v.get("type") == "IDLE":
            continue
        key = (str(v.get("host_or_device")), str(v.get("type")))
        entry = totals.setdefault(key, [0.0, 0.0])
        entry[0] += float(v.get("total_self_time") or 0)
        entry[1] += float(v.get("occurrences") or 0)
    out: List[Dict[str, Any]] = []
    for where in ("Device", "Host"):
        mine = sorted(
            ((k[1], t, n) for k, (t, n) in totals.items() if k[0] == where), key=lambda x: -x[1]
        )
        whole = sum(t for _, t, _ in mine) or 1.0
        out += [
            {
                "where": where,
                "type": kind,
                "self_ms": round(t / 1000, 3),
                "percent": round(100 * t / whole, 1),
                "occurrences": int(n),
            }
            for kind, t, n in mine[:TOP]
        ]
    return out, None


def summary(record: Dict[str, Any]) -> str:
    """One line for the messages: the device's top op types, or why there are none."""
    device = [r for r in record.get("top") or [] if r["where"] == "Device"]
    rows = device or [r for r in record.get("top") or [] if r["where"] == "Host"]
    if not rows:
        return f"profile in {record.get('folder')}: {record.get('error') or 'no op recorded'}"
    side = "GPU" if device else "host"
    top = ", ".join(f"{r['type']} {r['percent']:g} %" for r in rows[:6])
    return f"profile ({side} self-time, {record.get('steps')} steps): {top}"
