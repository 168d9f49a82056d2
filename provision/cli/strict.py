"""Options given twice, refused before a command runs.

Click keeps the last value of an option that is given twice (`--tf 2.13 --tf 2.14` renders 2.14
and says nothing), so a script that builds a command line by appending options silently does
something else than it reads. Every option that takes one value may be given once; options
declared `multiple=True` (--platform, --channel, --python of bench) and counters (-v) may repeat.
"""

from __future__ import annotations

from collections.abc import Sequence

import click


def _value_options(command: click.Command) -> tuple[dict[str, click.Option], set[str]]:
    """Every spelling of every option of the command -> the option; and the spellings of flags
    (which take no value, so the word after them is not theirs)."""
    by_spelling: dict[str, click.Option] = {}
    flags: set[str] = set()
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        for spelling in (*param.opts, *param.secondary_opts):
            by_spelling[spelling] = param
            if param.is_flag or param.count:
                flags.add(spelling)
    return by_spelling, flags


def repeated_option(command: click.Command, args: Sequence[str]) -> str | None:
    """The first single-valued option that `args` give twice, as the user spelled it; or None.
    Reading stops at `--` and, for a command that takes the rest of the line as it is (`run`),
    at its first argument, as Click's own parser does."""
    by_spelling, flags = _value_options(command)
    interspersed = command.allow_interspersed_args
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            if not interspersed:
                break  # `run NAME CMD...`: Click reads no option after the first argument
            continue
        spelling, has_value = word.split("=", 1)[0], "=" in word
        if spelling not in by_spelling and not word.startswith("--") and len(word) > 2:
            spelling, has_value = word[:2], True  # -ovalue, or -qv: flags run together
            if spelling in flags:
                continue
        option = by_spelling.get(spelling)
        if option is None:
            continue  # Click says what is wrong with an unknown option
        if spelling not in flags and not has_value:
            i += 1  # the option's value, whatever it looks like
        if option.multiple or option.count or (spelling in flags and not option.secondary_opts):
            continue  # --jit and --no-jit are one option: the pair is refused too
        key = option.name or spelling
        if key in seen:
            if seen[key] != spelling:
                return f"{seen[key]} and {spelling} are one option; give one of them, once"
            return f"{spelling} given twice; give it once"
        seen[key] = spelling
    return None


def refuse_given(ctx: click.Context, names: Sequence[str], why: str) -> None:
    """A usage error when one of these parameters was typed on the command line (a default or an
    environment variable is not a request): an option that does not apply is refused, never
    silently ignored."""
    from click.core import ParameterSource

    for name in names:
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
            param = next(p for p in ctx.command.params if p.name == name)
            spelled = param.opts[0] if isinstance(param, click.Option) else name
            raise click.UsageError(f"{spelled} {why}", ctx)


def refuse_other_paths(ctx: click.Context, path: str) -> None:
    """--solver is the conda path's, --installer the pip and system paths': refused elsewhere."""
    from provision.matrix import kinds

    if not kinds.of(path).conda_env:
        refuse_given(ctx, ["solver"], f"applies to the conda path only, not the {path} path")
    else:
        refuse_given(ctx, ["installer"], "applies to the pip and system paths, not the conda path")
