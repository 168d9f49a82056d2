"""Locking: `provision lock NAME` writes or checks the lockfile beside envs/NAME/'s inputs.

The command and `check_lock()` (the check made before installing from a lock) are in locking;
the lock's inputs in lockinputs, its header and digests in lockfile, what makes a lock complete
and closed in lockcheck, the conda path in condalock / condapip / condafile, the pip and system
paths in pylock / userlock / frameworks / conflicts / requirements. The face is the two entry
points the commands call, `lock.run` and `lock.check_lock`.
"""

from provision.lock.locking import check_lock, run

__all__ = ["check_lock", "run"]
