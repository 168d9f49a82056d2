"""`probe()`: every probe at once, and the HostReport assembled from their typed results."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from provision.host.discovery import probe_environments, probe_ptxas
from provision.host.gpu import probe_gpus
from provision.host.libraries import probe_libraries
from provision.host.model import Driver, HostReport
from provision.host.probe_threads import Task, run_all
from provision.host.root import Context
from provision.host.system import os_family, probe_system


def probe(
    root: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> HostReport:
    """Run every probe at once, each in its own thread: none can stop the others or hang us."""
    ctx = Context(root, os.environ if env is None else env, timeout)
    started = time.monotonic()
    system = Task("system", lambda: probe_system(ctx))
    gpus = Task("gpus", lambda: probe_gpus(ctx))
    libraries = Task("libraries", lambda: probe_libraries(ctx))
    ptxas = Task("ptxas", lambda: probe_ptxas(ctx))
    environments = Task("environments", lambda: probe_environments(ctx))
    # The GPU probe may make three external calls in a row (NVML, then nvidia-smi twice).
    records = run_all([system, gpus, libraries, ptxas, environments], started, 3 * ctx.timeout + 2)

    s, g, lib = system.result, gpus.result, libraries.result
    driver = (g.driver if g is not None else None) or Driver()
    if s is not None:
        driver = replace(
            driver,
            kernel_module=s.kernel_module,
            user_space=s.user_space,
            user_space_all=s.user_space_all,
        )
    return HostReport(
        os=s.os if s else os_family(sys.platform),
        machine=s.machine if s else ctx.machine,
        distro=s.distro if s else "",
        kernel=s.kernel if s else "",
        wsl=s.wsl if s else False,
        wsl_lib=s.wsl_lib if s else "",
        stand_in=ctx.stand_in,
        driver=driver,
        gpus=g.gpus if g else (),
        ld_library_path=(
            lib.ld_library_path if lib else tuple(ctx.show(d) for d in ctx.dirs("LD_LIBRARY_PATH"))
        ),
        loader_dirs=lib.loader_dirs if lib else (),
        libraries=lib.libraries if lib else (),
        ptxas=ptxas.result.ptxas if ptxas.result else (),
        pythons=environments.result.pythons if environments.result else (),
        environments=environments.result.environments if environments.result else (),
        probes=tuple(records),
    )
