"""`provision bench`: runs the payload's benchmark inside an environment, summarises its report."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import _proc
from provision.errors import ProvisionError
from provision.payload_app import payload_argv


class BenchError(ProvisionError):
    """The benchmark could not run, or printed no report."""


@dataclass(frozen=True)
class BenchResult:
    report: dict[str, Any]
    plot: Path | None

    def lines(self) -> list[str]:
        r = self.report
        out = [
            f"TensorFlow {r['tensorflow']} on {len(r['devices'])} device(s): "
            f"{r['settings']['model']} {r['settings']['image_size']}px"
        ]
        out.append(
            "  matmul "
            + ", ".join(f"{m['precision']} {m['tflops']:g} TFLOP/s" for m in r["matmul"])
        )
        out.append(
            f"  {'devices':>7}  {'precision':<15} {'images/s':>10} {'epoch s':>8} "
            f"{'accuracy':>8} {'speed-up':>8} {'efficiency':>10}"
        )
        for run in r["runs"]:
            out.append(
                f"  {run['gpus']:>7}  {run['precision']:<15} {run['images_per_s']:>10.1f} "
                f"{run['epoch_s']:>8.1f} {run['accuracy']:>8.3f} {run['speedup']:>8.2f} "
                f"{run['efficiency']:>10.2f}"
            )
        for f in r.get("failed", []):
            out.append(f"  {f['gpus']:>7}  {f['precision']:<15} failed: {f['error']}")
        out += [f"  note: {m}" for m in r.get("messages", [])]
        if self.plot is not None:
            out.append(f"  plot: {self.plot}")
        return out


def bench_argv(python: Path, options: Mapping[str, Any], json_out: Path) -> list[str]:
    args = ["--json", str(json_out)]
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return payload_argv(python, "bench", args)


def run(
    python: Path,
    *,
    options: Mapping[str, Any],
    plot: Path | None,
    timeout: float = 3600,
) -> BenchResult:
    """The benchmark with an environment's interpreter, as it is: its own hook finds CUDA."""
    if not Path(python).exists():
        raise BenchError(f"no interpreter at {python}")
    with tempfile.TemporaryDirectory(prefix="provision-bench-") as tmp:
        report_file = Path(tmp) / "report.json"
        done = _proc.run(bench_argv(python, options, report_file), timeout=timeout, check=False)
        if not report_file.is_file():
            raise BenchError(
                f"the benchmark failed (exit {done.returncode}): {done.last_line()[-300:]}"
            )
        report = json.loads(report_file.read_text(encoding="utf-8"))
    if plot is not None:
        write_plot(report, plot)
    return BenchResult(report, plot)


def write_plot(report: Mapping[str, Any], plot: Path) -> None:
    """Plot on the host: the environment holds TensorFlow, not necessarily matplotlib."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise BenchError("--plot needs matplotlib: pip install 'provision[bench]'") from exc
    from provision.payload import bench as payload_bench

    plot.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=plot.parent, suffix=".png", delete=False) as fh:
        tmp = Path(fh.name)
    try:
        payload_bench.plot(dict(report), str(tmp))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # NamedTemporaryFile creates 0600; a plot is for sharing
        tmp.replace(plot)
    finally:
        tmp.unlink(missing_ok=True)
