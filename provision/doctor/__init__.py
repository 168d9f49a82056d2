"""Doctor: judges a HostReport against the matrix.

For every release and path: `runs` (ready on this host now), `fix` (runs after the fixes listed,
each an exact command), `cannot` (with why: driver too old for the release's CUDA, GPU too old or
too new for the build, native Windows), or `n/a` (the path does not serve the release anywhere).
Host-wide findings (reboot due, two cuDNN copies on the loader's path, libraries newer than the
driver, ...) come first. Pure: the probing is provision.host's; `run` only ties the two together.

Modules: `examine` (`run`: probe, judge, list the registered environments; the face re-exports it),
`diagnosis` (the results, the verdict and finding words, and their JSON), `findings` (host-wide
findings, once per diagnosis), `hardware` (the driver and GPUs against a release), `judge`
(`diagnose`: a verdict per release and path), and `version_numbers` (lenient version numbers). The
terminal layout is the CLI's (cli/doctor_report).
"""

from provision.doctor.examine import run

__all__ = ["run"]
