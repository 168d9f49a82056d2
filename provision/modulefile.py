"""An Lmod module file (Lua) for an environment built into a shared prefix: `module load NAME`
puts the environment's bin first on PATH, so `python` is its interpreter, which finds its CUDA
libraries through provision's start-up hook with nothing to activate (as Jupyter and cron use it).

One family (`provision_env`) for every environment: loading a second swaps the first out, as Lmod
does for compilers. Pure: a record in, the file's text out; nothing in it changes from run to run.
"""

from __future__ import annotations

from provision.registry import Record

FAMILY = "provision_env"  # an identifier: Lmod exports it as LMOD_FAMILY_<NAME>


def lua(text: str) -> str:
    """A Lua string literal of text (double-quoted, escaped: a path may hold anything)."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def text(record: Record, cuda: str, cudnn: str) -> str:
    what = (
        f"TensorFlow {record.tf} (CUDA {cuda}, cuDNN {cudnn}), Python {record.python}, "
        f"{record.path} path, built by provision at {record.prefix}"
    )
    bin_dir = f"{record.prefix.rstrip('/')}/bin"
    help_text = (
        f"{record.name}: {what}.\n"
        f"python is the environment's interpreter; nothing to activate.\n"
        f"Check it on a GPU node: provision verify {record.name} --require-gpu"
    )
    return (
        f"-- {record.name}: {what}\n"
        f"-- Written by provision export {record.name} DIR --modulefile; write it again the same "
        "way after the environment is rebuilt elsewhere.\n"
        f"help({lua(help_text)})\n"
        f"whatis({lua('Name: ' + record.name)})\n"
        f"whatis({lua('Version: ' + record.tf)})\n"
        f"whatis({lua('Description: ' + what)})\n"
        f'family("{FAMILY}")\n'
        f"prepend_path({lua('PATH')}, {lua(bin_dir)})\n"
    )
