"""Host probes: what this machine offers TensorFlow on a GPU, as a HostReport (facts, no verdicts).

Each probe (system, gpus, libraries, ptxas, environments) runs in its own thread under a deadline;
one that fails, finds nothing or hangs records that in `HostReport.probes` and hides nothing else.
Nothing here needs root. Driver libraries (NVML, cuDNN, the CUDA runtime) are only ever loaded in
a child interpreter (`_hostprobe.py`), so a broken driver can neither crash nor hang the doctor.

Every file is read through a root directory, `/` on a real host. Tests, and anyone inspecting a
copy of a machine, point it at a stand-in tree (`provision doctor --root DIR` or
PROVISION_HOST_ROOT): /proc, /etc/ld.so.conf.d, /usr/local/cuda-*, site-packages and conda prefixes
are then read from there, and paths from the environment (PATH, LD_LIBRARY_PATH, HOME,
CONDA_PREFIX, ...) are taken as paths of that tree. Paths in the report are the host's paths, with
the home directory shown as `~`, so that a report can be pasted into an issue as it is.
Environment knobs: PROVISION_NO_NVML=1 (use nvidia-smi), PROVISION_NO_DLOPEN=1 (never load a
library, read versions from files only), PROVISION_PROBE_TIMEOUT (seconds per external call).

Modules: `model` (the report, the probes' status words, and its JSON), `root` (the stand-in root),
`loader` (ld.so's search), `library_versions` (a library's version), `gpu` (NVML, nvidia-smi, the
driver's files), `system`, `discovery` (Pythons, environments, toolkits, ptxas), `libraries` (the
CUDA library search), `probe_threads` (threads and the deadline) and `probing` (`probe()`). Each
probe returns its own frozen result; only `probe()` puts them together.
"""

from provision.host.loader import loader_conf_dirs
from provision.host.model import (
    KINDS,
    SCHEMA,
    Driver,
    Gpu,
    HostEnvironment,
    HostReport,
    Library,
    Probe,
    ProbeStatus,
    Ptxas,
)
from provision.host.probing import probe
from provision.host.root import DEFAULT_TIMEOUT

__all__ = [
    "DEFAULT_TIMEOUT",
    "KINDS",
    "SCHEMA",
    "Driver",
    "Gpu",
    "HostEnvironment",
    "HostReport",
    "Library",
    "Probe",
    "ProbeStatus",
    "Ptxas",
    "loader_conf_dirs",
    "probe",
]
