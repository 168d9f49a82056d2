"""How a diagnosis is shown: the terminal report, paste-able into an issue as it is."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Sequence

from provision import __version__
from provision.cli.columns import columns
from provision.doctor.diagnosis import KIND_TEXT, STATUS_TEXT, Diagnosis, Verdict
from provision.errors import ProvisionError
from provision.matrix import Matrix, kinds


def render(d: Diagnosis, matrix: Matrix | None = None) -> str:
    """The terminal report, paste-able into an issue as it is (GPU UUIDs, home anonymised)."""
    h = d.host
    lines = [
        f"provision doctor {__version__}" + (f" -- TensorFlow {d.tf}" if d.tf else ""),
        "",
        "Host",
    ]
    system = ", ".join(
        x for x in (h.distro, f"kernel {h.kernel}" if h.kernel else "", h.machine) if x
    )
    lines.append(_kv("system", (system or h.os) + (" (WSL2)" if h.wsl else "")))
    drv = h.driver
    if drv.version:
        lines.append(
            _kv("driver", f"{drv.version}, supports CUDA <= {drv.cuda or '?'} (from {drv.source})")
        )
    elif not h.has_driver:
        lines.append(_kv("driver", "none"))
    if drv.kernel_module or drv.user_space:
        lines.append(
            _kv(
                "kernel/user",
                f"kernel module {drv.kernel_module or '-'}, "
                f"user-space libcuda {drv.user_space or '-'}",
            )
        )
    if h.wsl_lib:
        lines.append(_kv("WSL driver", f"{h.wsl_lib}/libcuda.so.1"))
    for g in h.gpus:
        mem = f"{g.memory_mib / 1024:.1f} GiB" if g.memory_mib else "memory ?"
        extra = ", ".join(
            x
            for x in (
                f"MIG {g.mig}" if g.mig else "",
                f"persistence {g.persistence}" if g.persistence else "",
            )
            if x
        )
        lines.append(
            _kv(
                f"GPU {g.index}",
                f"{g.name}, compute capability {g.compute_capability or '?'}, {mem}"
                + (f", {extra}" if extra else ""),
            )
        )
    lines.append(_kv("Python", ", ".join(h.pythons) or "none found"))
    lines.append(_kv("LD_LIBRARY_PATH", ":".join(h.ld_library_path) or "(unset)"))
    for e in h.environments:
        lines.append(
            _kv(
                "environment",
                f"{e.prefix} ({e.kind}, Python {e.python or '?'}): tensorflow {e.tensorflow}",
            )
        )
    for r in d.registered:
        state = "" if r.present else " (prefix missing)"
        verdict = r.last_verify or "never verified"
        lines.append(
            _kv(f"built {r.name}", f"TensorFlow {r.tf}, {r.path}, {r.prefix}{state}: {verdict}")
        )

    lines += ["", "CUDA libraries"]
    if not h.libraries and not h.ptxas:
        lines.append("  none found")
    for lib in h.libraries:
        rank = (
            ""
            if lib.loader_rank is None
            else (
                " [loads first]" if lib.loader_rank == 0 else f" [shadowed, #{lib.loader_rank + 1}]"
            )
        )
        where = ", ".join(lib.found_in) + (
            f" in {lib.env}" if lib.env and lib.env not in lib.path else ""
        )
        built = f"; built for CUDA {lib.built_for}" if lib.built_for else ""
        lines.append(f"  {KIND_TEXT[lib.kind]:<13}{lib.version or '?':<12}{lib.path}")
        lines.append(
            f"  {'':<25}{lib.soname or 'no SONAME'}; version from {lib.version_from or '-'}"
            f"{built}; {where}{rank}"
        )
    for tool in h.ptxas:
        lines.append(f"  {'ptxas':<13}{tool.version or '?':<12}{tool.path}")

    lines += ["", "Findings"]
    marks = {"error": "!!", "warning": " !", "note": " -"}
    for f in d.findings:
        lines.append(f" {marks.get(f.level, ' -')} {f.text}")
        if f.fix:
            lines.append(f"      fix: {f.fix}")
    if not d.findings:
        lines.append("  none")

    lines += ["", "Verdicts", _verdict_table(d, matrix)]
    for tfs, vs in _groups(d.verdicts, matrix):
        lines.append("")
        if len(tfs) == 1:
            lines.append(f"TensorFlow {tfs[0]}")
        else:
            lines.append(f"TensorFlow {', '.join(tfs)} (alike: read X.Y as each)")
        lines += _release_details(vs)

    lines += ["", "Probes"]
    for p in h.probes:
        lines.append(f"  {p.name:<13}{p.status:<9}{p.seconds:6.2f} s  {p.detail}")
    runs = sum(v.status == "runs" for v in d.verdicts)
    fix = sum(v.status == "fix" for v in d.verdicts)
    cannot = sum(v.status == "cannot" for v in d.verdicts)
    lines += [
        "",
        f"Summary: {runs} ready, {fix} after a fix, {cannot} cannot"
        + (
            ""
            if d.ok
            else " -- this host cannot run "
            + (f"TensorFlow {d.tf}" if d.tf else "any release")
            + " on a GPU"
        ),
    ]
    return "\n".join(lines)


def _release_details(vs: Sequence[Verdict]) -> list[str]:
    shared = _shared_cannot(vs)
    if shared is not None:
        return ["  cannot on every path", *(f"    - {r}" for r in shared)]
    offered = [v for v in vs if v.status != "n/a"]
    common = [n for n in offered[0].notes if all(n in v.notes for v in offered)] if offered else []
    lines = [f"  note: {n}" for n in common]
    for v in vs:
        lines.append(f"  {v.path:<7} {STATUS_TEXT[v.status]}")
        lines += [f"    - {r}" for r in v.reasons]
        lines += [f"    $ {f}" for f in v.fixes]
        lines += [f"    note: {n}" for n in v.notes if n not in common]
    return lines


def _groups(
    verdicts: Sequence[Verdict], matrix: Matrix | None
) -> list[tuple[list[str], list[Verdict]]]:
    """Consecutive releases whose verdicts read the same but for their version, grouped so that
    a report over the whole matrix stays short; --tf shows one release with exact commands."""
    groups: list[tuple[list[str], list[Verdict]]] = []
    last_key: tuple[tuple[object, ...], ...] | None = None
    for tf in dict.fromkeys(v.tf for v in verdicts):
        vs = [v for v in verdicts if v.tf == tf]
        pin = ""
        if matrix is not None:
            with contextlib.suppress(ProvisionError):
                pin = matrix.release(tf).pin
        general = [_generalise(v, tf, pin) for v in vs]
        key = tuple((v.path, v.status, v.reasons, v.fixes, v.notes) for v in general)
        if key == last_key:
            groups[-1][0].append(tf)
            groups[-1] = (groups[-1][0], general)
        else:
            groups.append(([tf], vs))
        last_key = key
    return groups


def _generalise(v: Verdict, tf: str, pin: str) -> Verdict:
    version = re.compile(rf"(?<![\d.]){re.escape(tf)}(?![\d])")

    def general(texts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(version.sub("X.Y", t.replace(pin, "X.Y.Z") if pin else t) for t in texts)

    return dataclasses.replace(
        v, reasons=general(v.reasons), fixes=general(v.fixes), notes=general(v.notes)
    )


def _kv(key: str, value: str) -> str:
    return f"  {key:<15} {value}"  # one space at least: `built tf2.13-pip` is 16 characters


def _shared_cannot(vs: Iterable[Verdict]) -> tuple[str, ...] | None:
    offered = [v for v in vs if v.status != "n/a"]
    if (
        offered
        and all(v.status == "cannot" for v in offered)
        and len({v.reasons for v in offered}) == 1
    ):
        return offered[0].reasons
    return None


def _verdict_table(d: Diagnosis, matrix: Matrix | None) -> str:
    rows = [("TF", "CUDA", "cuDNN", "driver >=", "compute", *kinds.NAMES)]
    for tf in dict.fromkeys(v.tf for v in d.verdicts):
        cells = {v.path: v.status for v in d.verdicts if v.tf == tf}
        facts = ("", "", "", "")
        if matrix is not None:
            try:
                rel = matrix.release(tf)
            except ProvisionError:
                rel = None
            if rel is not None:
                cu = matrix.cuda_of(rel)
                facts = (
                    cu.version,
                    rel.cudnn,
                    f"{cu.driver_min} ({cu.driver_compat_min})",
                    rel.compute_min,
                )
        rows.append((tf, *facts, *(cells.get(p, "") for p in kinds.NAMES)))
    return "\n".join(columns(rows, indent="  "))
