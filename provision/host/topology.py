"""How the GPUs are connected to each other: `nvidia-smi topo -m`'s matrix, read and summarised as
NVLink or PCIe (what data-parallel training's all-reduce travels over)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.errors import ProvisionError
from provision.host.gpu import _find_nvidia_smi
from provision.host.root import Context

# nvidia-smi's legend: NV# bonded NVLinks; the rest are PCIe paths, nearest first.
PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Interconnect:
    kind: str  # "NVLink", "PCIe", "NVLink and PCIe", "one GPU", "unknown"
    links: dict[str, str] = field(default_factory=dict)  # "0-1" -> "NV18", "PHB", ...
    source: str = "nvidia-smi topo -m"
    detail: str = ""  # why it is unknown

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind, "links": dict(self.links), "source": self.source,
                "detail": self.detail}  # fmt: skip

    def describe(self) -> str:
        """The kind and its link codes, as "NVLink (NV18)"; the kind alone without pairs."""
        codes = sorted(set(self.links.values()))
        return f"{self.kind} ({', '.join(codes)})" if codes else self.kind


def parse_topo(text: str) -> dict[str, str]:
    """`nvidia-smi topo -m` -> {"i-j": code} for every pair of GPUs i < j."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = next((ln.split() for ln in lines if re.match(r"^\s*GPU0\s", ln)), None)
    if header is None:
        return {}
    gpu_columns = []
    for token in header:
        if not re.fullmatch(r"GPU\d+", token):
            break
        gpu_columns.append(int(token[3:]))
    links: dict[str, str] = {}
    for line in lines:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = int(cells[0][3:])
        for col, code in zip(gpu_columns, cells[1 : 1 + len(gpu_columns)], strict=False):
            if row < col:
                links[f"{row}-{col}"] = code
    return links


def summarise(links: dict[str, str], gpus: int) -> Interconnect:
    if gpus == 1:
        return Interconnect("one GPU")
    if not links:
        return Interconnect("unknown", detail="nvidia-smi topo -m listed no pairs of GPUs")
    nvlink = [c.startswith("NV") for c in links.values()]
    if all(nvlink):
        kind = "NVLink"
    elif not any(nvlink) and all(c in PCIE for c in links.values()):
        kind = "PCIe"
    elif not any(nvlink):
        kind = "unknown"
    else:
        kind = "NVLink and PCIe"
    return Interconnect(kind, links)


def probe_interconnect(ctx: Context, gpus: int) -> Interconnect:
    """The interconnect between this host's GPUs; "unknown" with the reason when it cannot say."""
    if gpus <= 1:
        return Interconnect("one GPU" if gpus == 1 else "no GPU")
    exe = _find_nvidia_smi(ctx)
    if exe is None:
        return Interconnect("unknown", detail="nvidia-smi not found")
    try:
        done = ctx.run([str(exe), "topo", "-m"])
    except ProvisionError as exc:
        return Interconnect("unknown", detail=str(exc)[:200])
    if done.returncode != 0:
        return Interconnect("unknown", detail=done.last_line()[:200])
    return summarise(parse_topo(done.stdout), gpus)
