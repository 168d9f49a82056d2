"""provision-conda: a small conda-compatible front end over py-rattler, for conda-lock to drive.

conda-lock needs conda, mamba or micromamba. Where none is installed, `provision lock` and
`provision install` point conda-lock at this one (`--conda provision-conda`); conda-lock takes it
for conda (it tells the kinds apart by the executable's name), so it calls exactly:

  create --prefix P --dry-run --json [--override-channels] --channel URL... SPECS (lock)
  list --no-pip -p P --json; install ... -p P --json --dry-run SPECS            (lock --update)
  info --json                                                                   (package caches)
  create --quiet [--copy] --file X.lock --yes --prefix P                        (install)
  run --prefix P pip install --no-deps -r F                                     (install, pip part)

Virtual packages arrive as conda-lock's fake `file://` channel (records named `__*`) plus
CONDA_OVERRIDE_* variables; the target platform as CONDA_SUBDIR. Answers use conda's JSON shapes.
Explicit lockfiles are installed only after every archive matched the lock's checksum.

Modules: `cli` (arguments, dispatch, exit codes), `conda_commands` (create/install/update, list,
info, env), `run`, `channels` (channel URLs, conda-lock's fake channel, reachability), `virtual`
(virtual packages), `solve` (the solve and conda's FETCH/LINK shapes), `conda_prefix` (an installed
prefix), `install` (explicit lockfiles, checksums), `config` (caches and names), `conda_errors`.
"""

from provision.solver.channels import check_reachable
from provision.solver.cli import main
from provision.solver.conda_errors import CondaError

__all__ = ["CondaError", "check_reachable", "main"]
