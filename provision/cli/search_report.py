"""A search's result shown (`provision bench --best`, or a saved one with --report): one table
per environment (every trial, its speed-up over the defaults and its accuracy, then the best and
its command), one summary row per environment when several were searched, and a plot of each
environment's defaults against its best. Pure, except the plot, drawn with matplotlib."""

from __future__ import annotations

from pathlib import Path

from provision import bench_search
from provision.cli.bench_report import (
    SETTINGS,
    _fmt,
    _setting,
    describe_hardware,
    describe_software,
    write_png,
)
from provision.cli.columns import columns


def lines(result: bench_search.SearchResult) -> list[str]:
    """Each environment's search: where and with what it ran, every trial with its speed-up over
    the defaults and its accuracy, then the best setting and the command that gives it."""
    out: list[str] = []
    for search in result.searches:
        if out:
            out.append("")
        default = search.default
        first = default.report if default and default.report else {}
        out.append(f"{search.environment}: {describe_software(first) if first else ''}".rstrip())
        if first:
            out.append(describe_hardware(first))
            settings = [f"{t} {_setting(first, k)}" for k, t in SETTINGS[:3]]
            settings += [
                f"{t} {_setting(first, k)}" for k, t in SETTINGS if k in ("steps", "warmup")
            ]
            out.append("search: " + ", ".join(settings) + f", budget {search.budget_s:g} s, "
                       f"took {search.seconds:.0f} s")  # fmt: skip
        if search.error:
            out.append(f"  {search.error}")
            continue
        if search.stopped:
            done = sum(1 for t in search.trials if t.status != "skipped")
            out.append(f"  search {search.stopped} after {done} trials: the best so far")
        base = default.images_per_s if default else None
        best = search.best
        head = ["setting", "images/s", "speed-up", "1st step s", "accuracy", ""]
        body = []
        for t in search.trials:
            ran = t.status == "ran"
            speedup = (t.images_per_s or 0) / base if ran and base else None
            note = "best" if t is best else "" if ran and t.learns else bench_search.outcome(t)
            if ran and not t.learns:
                note = "at chance: it learnt nothing" if t.at_chance else "learnt too little"
            body.append([
                t.label,
                _fmt(t.images_per_s, ",.1f"),
                "-" if speedup is None else f"{speedup:.2f}x",
                _fmt(t.first_step_s, ".1f"),
                _fmt(t.accuracy, ".3f"),
                note,
            ])  # fmt: skip
        out += columns([head, *body], indent="  ", right={1, 2, 3, 4})
        if best is None or default is None:
            out.append("best: none: no setting ran and learnt")
            continue
        gain = (best.images_per_s or 0) / (default.images_per_s or 1)
        out.append(
            f"best: {best.label}: {best.images_per_s:,.1f} images/s, {gain:.2f}x the defaults, "
            f"accuracy {best.accuracy:.3f} (defaults {default.accuracy:.3f})"
        )
        out.append(f"  {best.command}")
    if len(result.searches) > 1:
        out += ["", *summary_lines(result)]
    return out


def summary_lines(result: bench_search.SearchResult) -> list[str]:
    """One row per environment: its defaults, its best setting and the speed-up, side by side."""
    head = ["environment", "TensorFlow", "defaults", "best setting", "best", "speed-up", "accuracy"]
    body = []
    for s in result.searches:
        default, best = s.default, s.best
        report = default.report if default and default.report else {}
        sw = report.get("software")
        tf = str(sw.get("tensorflow")) if isinstance(sw, dict) else "-"
        gain = None
        if default and best and default.images_per_s and best.images_per_s:
            gain = best.images_per_s / default.images_per_s
        body.append([
            s.environment,
            tf,
            _fmt(default.images_per_s if default else None, ",.1f"),
            best.label if best else "none learnt",
            _fmt(best.images_per_s if best else None, ",.1f"),
            "-" if gain is None else f"{gain:.2f}x",
            _fmt(best.accuracy if best else None, ".3f"),
        ])  # fmt: skip
    table = columns([head, *body], indent="  ", right={2, 4, 5, 6})
    return ["each environment at its defaults and at its best (images/s):", *table]


def plot(result: bench_search.SearchResult, path: Path) -> None:
    """Images/s of each environment at its defaults and at its best, the best's setting written
    on its bar; the GPU named in the title."""
    write_png(path, lambda tmp: _draw(result, tmp))


def _draw(result: bench_search.SearchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(s, s.default, s.best) for s in result.searches if s.default is not None]
    if not rows:
        raise ValueError("no search ran its defaults: nothing to plot")
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.9 * len(rows)), dpi=120)
    names = [s.environment for s, _, _ in rows]
    y = range(len(rows))
    base = [d.images_per_s or 0.0 for _, d, _ in rows if d is not None]
    best = [(b.images_per_s or 0.0) if b else 0.0 for _, _, b in rows]
    ax.barh([i + 0.2 for i in y], base, height=0.4, label="defaults", color="#999999")
    ax.barh([i - 0.2 for i in y], best, height=0.4, label="best that learns", color="#1f77b4")
    for i, (_, d, b) in enumerate(rows):
        if b is not None and d is not None and d.images_per_s and b.images_per_s:
            gain = b.images_per_s / d.images_per_s
            ax.text(b.images_per_s, i - 0.2, f"  {b.label} ({gain:.2f}x)", va="center", fontsize=7)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel("images/s")
    first = rows[0][1]
    hw = describe_hardware(first.report or {}) if first else ""
    ax.set_title(hw.removeprefix("hardware: ").split(", CPU")[0], fontsize=8)
    ax.set_xlim(0, max(best + base) * 1.6)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
