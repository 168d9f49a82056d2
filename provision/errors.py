"""The one error root of provision: the CLI turns a ProvisionError into a line and an exit code."""

from __future__ import annotations


class ProvisionError(Exception):
    """A failure the user can act on. The message is one line that says what and how to fix it."""

    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM (`timeout`, systemd, a batch scheduler's job kill, `kill PID`): provision unwinds as
    for Ctrl-C, so that its temporary folders, children and half-made files go, then exits 143."""


class UsageError(ProvisionError):
    """The command line asks for something that cannot exist (exit 2, as Click's usage errors)."""

    exit_code = 2


class MatrixError(ProvisionError):
    """The matrix data file is invalid; the message names the row and the field."""


class UnknownRelease(ProvisionError):
    """A TensorFlow version the matrix does not know."""


class UnsupportedCombination(ProvisionError):
    """A release, path and Python that the matrix says cannot work together."""


class RenderError(ProvisionError):
    """Rendering or writing an environment directory failed."""


class StaleError(ProvisionError):
    """Generated files (rendered environments or locks) no longer match their inputs."""


class LockInvalid(StaleError):
    """A lockfile that cannot be trusted as it is: empty, without provision's header, truncated,
    edited after it was made, unreadable, or not complete and closed. Re-locking replaces it."""


class LockError(ProvisionError):
    """Locking failed (solver, channel, index)."""


class InstallError(ProvisionError):
    """Building an environment on this machine failed."""


class VerifyError(ProvisionError):
    """The smoke test could not run, or its report does not match the spec."""


class ToolMissing(ProvisionError):
    """An external program provision needs is not installed."""
