"""Installing: an environment built on this machine from its lock (a conda prefix, a venv, or the
system path's venv), and later brought in line with a new lock.

Modules: `build` (`install`: the build of a prefix, its marker written last, the record in the
registry), `place` (the prefix's marker and state, the leftovers of an interrupted build), `owned`
(what in a prefix is provision's), `installers` (uv, pip, conda-lock), `hashcheck`, `sync` and
`condasync` (a built prefix brought to a new lock), `prefix_hooks` (the set-up put into a prefix).
The face is the build's entry point and its result: `install.install`, `install.InstallResult`.
"""

from provision.install.build import InstallResult, install

__all__ = ["InstallResult", "install"]
