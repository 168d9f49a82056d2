"""Benchmark reports shown: one table for one or several environments (its header names the
hardware, the software as loaded, the settings and what accuracy measures), the same rows as a
markdown findings table with the command of each, and the speed-up plot. Pure, except `plot`,
which draws with matplotlib. Reports are in the current schema (`bench_schema.upgrade`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from provision import bench
from provision.cli.columns import columns
from provision.errors import ProvisionError
from provision.fileio import umask
from provision.payload import bench_schema

# One environment's report as parsed (JSON): each field is narrowed where it is read, and a
# field that is absent or null reads as empty.
BenchReport = Mapping[str, object]

# Settings shown, in order, with their labels; those equal in every report go on one line, those
# that differ become columns of the table.
SETTINGS = (
    ("model", "model"),
    ("image_size", "px"),
    ("batch_per_replica", "batch/replica"),
    ("global_batch", "global batch"),
    ("loop", "loop"),
    ("jit", "jit"),
    ("steps_per_execution", "steps/exec"),
    ("data_format", "format"),
    ("data", "data"),
    ("strategy", "strategy"),
    ("batchnorm", "batchnorm"),
    ("optimizer_jit", "optimizer jit"),
    ("xla_cache", "XLA cache"),
    ("xla_flags", "XLA_FLAGS"),
    ("steps", "steps"),
    ("warmup", "warm-up"),
    ("dataset", "dataset"),
    ("cpu_devices", "CPU devices"),
)


RIGHT = {"devices", "images/s", "step ms", "1st step s", "accuracy", "XLA", "speed-up"}
RIGHT |= {"efficiency", "px", "batch/replica", "global batch", "steps/exec", "steps", "warm-up"}


def _obj(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _runs(report: BenchReport) -> list[Mapping[str, object]]:
    return [_obj(run) for run in _seq(report.get("runs"))]


def _num(value: object) -> int | float:
    """A number of the report, for arithmetic; TypeError for anything else, as arithmetic says."""
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"not a number in the report: {value!r:.40}")


def label(report: BenchReport) -> str:
    env = _obj(report.get("environment"))
    return str(env.get("name") or f"TF {report.get('tensorflow')}")


def _setting(report: BenchReport, key: str) -> str:
    if key == "xla_flags":  # not an option: the variable as the run had it
        value = _obj(report.get("xla_environment")).get("XLA_FLAGS")
        flags = [f for f in str(value or "").split() if "cuda_data_dir" not in f]
        return " ".join(f.split("=")[0] if "_dir=" in f else f for f in flags) or "-"
    value = _obj(report.get("settings")).get(key)
    if value is None or value == "" or (key == "cpu_devices" and not value):
        return "-"
    if key == "xla_cache":  # a folder: whether there was one is what differs
        return "yes"
    return str(value)


def differing(reports: Sequence[BenchReport]) -> list[tuple[str, str]]:
    """The settings (key, label) whose values are not the same in every report."""
    return [(k, t) for k, t in SETTINGS if len({_setting(r, k) for r in reports}) > 1]


def describe_hardware(report: BenchReport) -> str:
    found = report.get("hardware")
    devices = ", ".join(str(d) for d in _seq(report.get("devices"))) or "none"
    if not found:
        return f"hardware: not recorded (devices: {devices})"
    hw = _obj(found)
    parts = []
    gpus = _seq(hw.get("gpus"))
    if gpus:
        kinds: dict[str, int] = {}
        for g in map(_obj, gpus):
            mem = f" ({_num(g['memory_mib']) / 1024:.0f} GiB)" if g.get("memory_mib") else ""
            kind = f"{g.get('name') or 'GPU'}{mem}"
            kinds[kind] = kinds.get(kind, 0) + 1
        parts.append(", ".join(f"{n} x {k}" for k, n in kinds.items()))
        if hw.get("driver"):
            cuda = f" (supports CUDA {hw['driver_cuda']})" if hw.get("driver_cuda") else ""
            parts.append(f"driver {hw['driver']}{cuda}")
        link = _obj(hw.get("interconnect"))
        if len(gpus) > 1:
            codes = sorted({str(code) for code in _obj(link.get("links")).values()})
            text = str(link.get("kind") or "unknown")
            parts.append(f"{text} ({', '.join(codes)})" if codes else f"interconnect {text}")
    else:
        parts.append("no GPU")
    cpu = _obj(hw.get("cpu"))
    if cpu:
        parts.append(f"CPU {cpu.get('model')} ({cpu.get('cores')} cores)")
    virtual = _obj(report.get("settings")).get("cpu_devices")
    if virtual:
        parts.append(f"run on {virtual} virtual CPU devices")
    return "hardware: " + ", ".join(parts)


def describe_software(report: BenchReport) -> str:
    sw = _obj(report.get("software"))
    build = _obj(sw.get("build"))
    loaded = _obj(sw.get("loaded"))
    parts = [f"TensorFlow {sw.get('tensorflow') or report.get('tensorflow')}"]
    if sw.get("keras"):
        parts.append(f"Keras {sw['keras']}")
    for key, name in (("cudart", "CUDA runtime"), ("cudnn", "cuDNN")):
        got = _obj(loaded.get(key)).get("version")
        built = build.get("cuda" if key == "cudart" else "cudnn")
        if got:
            parts.append(f"{name} {got}" + (f" (built for {built})" if built else ""))
        elif built:
            parts.append(f"{name} not loaded (built for {built})")
    if sw.get("python"):
        parts.append(f"Python {sw['python']}")
    return ", ".join(parts)


def _base(reports: Sequence[BenchReport]) -> tuple[str, float] | None:
    """(what, images/s) every speed-up is measured against: the first report's 1 x float32."""
    for r in reports:
        for run in _runs(r):
            if run["gpus"] == 1 and run["precision"] == "float32":
                return f"{label(r)} 1 x float32", float(_num(run["images_per_s"]))
    for r in reports:
        if r.get("runs"):
            run = _runs(r)[0]
            what = f"{label(r)} {run['gpus']} x {run['precision']}"
            return what, float(_num(run["images_per_s"]))
    return None


def _fmt(value: object, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _xla(run: Mapping[str, object]) -> str:
    xla = run.get("xla")
    return "-" if xla is None else "yes" if xla else "no"


def rows(reports: Sequence[BenchReport]) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows: one row per configuration that ran, in report order."""
    several = len({label(r) for r in reports}) > 1
    varying = differing(reports)
    base = _base(reports)
    head = (["environment"] if several else []) + [t for _, t in varying]
    head += ["devices", "precision", "images/s", "step ms", "1st step s", "accuracy", "XLA"]
    head += ["speed-up", "efficiency"]
    out = []
    for r in reports:
        for run in _runs(r):
            row = ([label(r)] if several else []) + [_setting(r, k) for k, _ in varying]
            speedup = _num(run["images_per_s"]) / base[1] if base else None
            row += [
                str(run["gpus"]),
                str(run["precision"]),
                f"{run['images_per_s']:,.1f}",
                _fmt(run.get("step_ms"), ".1f"),
                _fmt(run.get("first_step_s"), ".1f"),
                _fmt(run.get("accuracy"), ".3f") + (" at chance" if run.get("at_chance") else ""),
                _xla(run),
                _fmt(speedup, ".2f"),
                _fmt(run.get("efficiency"), ".2f"),
            ]
            out.append(row)
    return head, out


def lines(reports: Sequence[BenchReport]) -> list[str]:
    if not reports:
        return ["no report"]
    out = []
    hardware = [describe_hardware(r) for r in reports]
    several = len({label(r) for r in reports}) > 1
    if len(set(hardware)) == 1:
        out.append(hardware[0])
    else:
        out += [f"{label(r)}: {h}" for r, h in zip(reports, hardware, strict=True)]
    software = dict.fromkeys(f"{label(r)}: {describe_software(r)}" for r in reports)
    out += list(software) if several else [describe_software(reports[0])]
    varying = {k for k, _ in differing(reports)}
    common = [
        f"{t} {_setting(reports[0], k)}"
        for k, t in SETTINGS
        if k not in varying and _setting(reports[0], k) != "-"
    ]
    out.append("settings: " + ", ".join(common))
    tasks = dict.fromkeys(str(_obj(r.get("task")).get("description")) for r in reports)
    chance = _obj(reports[0].get("task")).get("chance")
    for text in tasks:
        out.append(f"task: {text}" + (f" (chance {chance:.2f})" if chance else ""))
    head, body = rows(reports)
    right = {i for i, h in enumerate(head) if h in RIGHT}
    out += columns([head, *body], indent="  ", right=right)
    for r in reports:
        who = f"{label(r)} " if several else ""
        for f in map(_obj, _seq(r.get("skipped"))):
            out.append(f"  {who}{f['gpus']} x {f['precision']}: skipped: {f['reason']}")
        for f in map(_obj, _seq(r.get("failed"))):
            out.append(f"  {who}{f['gpus']} x {f['precision']}: failed: {f['error']}")
    for i, r in enumerate(reports, start=1):
        if r.get("matmul"):
            who = f" ({label(r)})" if several else f" (report {i})" if len(reports) > 1 else ""
            mm = ", ".join(
                f"{m['precision']} {m['tflops']:g}" for m in map(_obj, _seq(r["matmul"]))
            )
            out.append(f"matmul TFLOP/s{who}: {mm}")
    base = _base(reports)
    if base and several:
        out.append(f"speed-up is relative to {base[0]}")
    for r in reports:
        out += [f"note: {m}" for m in _seq(r.get("messages"))]
    return out


def markdown(reports: Sequence[BenchReport]) -> list[str]:
    """The findings table: the rows of `lines` with TensorFlow/Keras and the command of each."""
    head, body = rows(reports)
    full = ["TensorFlow / Keras", *head, "command"]
    out = ["| " + " | ".join(full) + " |", "|" + "---|" * len(full)]
    i = 0
    for r in reports:
        sw = _obj(r.get("software"))
        tfk = f"{sw.get('tensorflow') or r.get('tensorflow')} / {sw.get('keras') or '?'}"
        command = f"`{r['command']}`" if r.get("command") else "-"
        for _ in _seq(r.get("runs")):
            out.append("| " + " | ".join([tfk, *body[i], command]) + " |")
            i += 1
    hardware = dict.fromkeys(describe_hardware(r) for r in reports)
    out += ["", *(f"{h}." for h in hardware)]
    return out


def plot(reports: Sequence[BenchReport], path: Path) -> None:
    """Speed-up against GPU count: a line per environment and precision, one baseline for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = _base(reports)
    runs = [run for r in reports for run in _runs(r)]
    if base is None or not runs:
        raise ValueError("no configuration ran: nothing to plot")
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    counts = sorted({_num(run["gpus"]) for run in runs})
    ax.plot(counts, counts, "k--", linewidth=1, label="ideal")
    several = len({label(r) for r in reports}) > 1
    varying = differing(reports)
    for r in reports:
        name = " ".join(
            ([label(r)] if several else []) + [f"{t} {_setting(r, k)}" for k, t in varying]
        )
        for prec in dict.fromkeys(run["precision"] for run in _runs(r)):
            mine = sorted(
                (run for run in _runs(r) if run["precision"] == prec), key=lambda x: _num(x["gpus"])
            )
            ax.plot(
                [_num(x["gpus"]) for x in mine],
                [_num(x["images_per_s"]) / base[1] for x in mine],
                "o-",
                label=f"{name} {prec}".strip(),
            )
    s = _obj(reports[0].get("settings"))
    hw = describe_hardware(reports[0]).removeprefix("hardware: ").split(", driver")[0]
    ax.set_title(
        f"{s.get('model')} {s.get('image_size')} px, batch {s.get('batch_per_replica')}/replica"
        f"\n{hw}",
        fontsize=8,
    )
    ax.set_xlabel("devices" if s.get("cpu_devices") else "GPUs")
    ax.set_ylabel(f"speed-up over {base[0]}", fontsize=8)
    ax.set_xticks(counts)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


# -- a result as the CLI shows it, and its plot -----------------------------------------------


def result_lines(result: bench.BenchResult) -> list[str]:
    out = lines(result.reports)
    out += [f"{e['environment']}: failed: {e['error']}" for e in result.errors]
    if result.plot is not None:
        out.append(f"plot: {result.plot}")
    return out


def with_plot(result: bench.BenchResult, plot: Path | None) -> bench.BenchResult:
    if plot is None or not result.reports:
        return result
    try:
        write_plot(result.reports, plot)
    except (
        OSError,
        ValueError,
        ProvisionError,
    ) as exc:  # the results stand; only the picture is not
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return bench.BenchResult(
            result.reports, result.errors, None, f"cannot write --plot {plot}: {why}"
        )
    return bench.BenchResult(result.reports, result.errors, plot)


def write_plot(reports: Sequence[Mapping[str, object]], path: Path) -> None:
    """Plot on the host: the environment holds TensorFlow, not necessarily matplotlib."""
    write_png(path, lambda tmp: plot([bench_schema.upgrade(dict(r)) for r in reports], tmp))


def write_png(path: Path, draw: Callable[[Path], None]) -> None:
    """A picture drawn into a temporary file beside path, then put in its place (never a device,
    FIFO or folder there); readable by all, as a plot is for sharing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise bench.BenchError("--plot needs matplotlib: pip install 'provision[bench]'") from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".png", delete=False) as fh:
        tmp = Path(fh.name)
    try:
        draw(tmp)
        tmp.chmod(0o666 & ~umask())  # NamedTemporaryFile creates 0600; a plot is for sharing
        from provision.paths import output_file

        output_file(path, "--plot", force=True)  # still no device, FIFO or folder there
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
