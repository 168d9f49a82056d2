"""The command line: Click wiring (commands, use), option checks (args) and what is shown
(present, table). The core below returns data; only this package prints."""

from provision.cli.commands import cli, main

__all__ = ["cli", "main"]
