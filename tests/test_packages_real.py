"""The user's packages with real TensorFlow, from the package index (slow): a lab's environment
with pandas and scikit-learn created and verified, numpy 2 refused with the explanation, and
matplotlib added to the built environment in place and verified again, then dropped."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import clitools
import pytest

from provision import tools

TF = "2.13"
PYTHON = "3.11"


provision = functools.partial(clitools.provision, timeout=1800)


@pytest.mark.slow
def test_a_lab_environment_with_its_packages_is_created_changed_and_verified(
    tmp_path: Path,
) -> None:
    if not tools.python_candidates(PYTHON):
        pytest.skip(f"TensorFlow {TF} needs Python {PYTHON}, which this host does not have")
    home = {"PROVISION_HOME": str(tmp_path / "home")}
    out = tmp_path / "envs"
    done = provision("create", "--tf", TF, "--path", "pip", "--python", PYTHON, "--out", str(out),
                     "--with", "pandas", "--with", "scikit-learn", "--json", env=home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    python = str(data["python"])
    shown = subprocess.run(
        [python, "-c", "import numpy, pandas, sklearn, tensorflow as tf; "
         "print(numpy.__version__, tf.__version__)"],
        capture_output=True, text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    ).stdout.split()  # fmt: skip
    assert shown[1] == "2.13.1" and shown[0].startswith("1.24.")  # TensorFlow's numpy kept
    name = str(data["name"])

    refused = provision("add", name, "numpy>=2", "--out", str(out), env=home)
    assert refused.returncode == 1
    assert "numpy>=1.22,<=1.24.3" in refused.stderr and "what fits: numpy 1.24." in refused.stderr

    added = provision("add", name, "matplotlib", "--out", str(out), env=home)
    assert added.returncode == 0, added.stderr
    assert "+ matplotlib " in added.stdout and "smoke test passed" in added.stdout
    assert "  numpy " not in added.stdout  # nothing of TensorFlow's moved
    subprocess.run([python, "-c", "import matplotlib"], check=True)

    dropped = provision("drop", name, "matplotlib", "--out", str(out), "--no-verify", env=home)
    assert dropped.returncode == 0, dropped.stderr
    gone = subprocess.run([python, "-c", "import matplotlib"], capture_output=True)
    assert gone.returncode != 0
    checked = provision("check", name, env=home)
    assert checked.returncode == 0, checked.stdout + checked.stderr
