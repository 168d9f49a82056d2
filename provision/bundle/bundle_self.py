"""provision's own wheels in a bundle: its wheel (selfwheel's, built from the running package, no
build backend, no network) and its dependencies' for the target's Python and platform, resolved by
pip at this host's versions where the target's Python has them: from the bundle cache alone first,
from the index only for what the cache lacks."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from provision.bundle.bundle_fetch import (
    BundleCache,
    BundleMachine,
    Item,
    cached_digests,
    digests,
    pip_platform_args,
    pip_reason,
    run_pip,
    store,
)
from provision.bundlefile.bundle_format import BundleError
from provision.progress import Event, Report


def provision_wheels(
    target: BundleMachine, cache: BundleCache, wheelhouse: Path | None, report: Report
) -> list[Item]:
    """provision's wheel and its dependencies' for the target's Python and platform: from
    `wheelhouse` as they are, else resolved by pip (at this host's versions where it can), from
    the cache alone first and from the index only for what the cache lacks. provision's own
    wheel is selfwheel's: the running package's files, no build backend, no network."""
    from provision.bundlefile import selfwheel

    if wheelhouse is not None:
        files = check_wheelhouse(wheelhouse)
        return [Item(f"provision/{f.name}", "provision", f, digests(f)[0]) for f in files]
    own = selfwheel.build(cache.folder("provision-build"))
    folder = cache.folder("wheels")
    with tempfile.TemporaryDirectory(prefix="provision-deps-", dir=folder) as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(installed_pins(), encoding="utf-8")
        dest = Path(tmp) / "out"
        base = ["download", "-d", str(dest), "-c", str(constraints),
                *pip_platform_args(target, target.provision_python), str(own)]  # fmt: skip
        done = run_pip([*base, "--no-index", "--find-links", str(folder)])
        if not done:
            report(
                Event(
                    "info",
                    f"downloading provision's dependencies for Python {target.provision_python}",
                )
            )
            shutil.rmtree(dest, ignore_errors=True)
            done = run_pip(base)
        if not done:
            raise BundleError(
                f"pip download of provision's dependencies for Python {target.provision_python} "
                f"failed: {pip_reason(done)}; choose another --provision-python, or give "
                "--provision-wheels DIR"
            )
        out = []
        for path in sorted(dest.iterdir()):
            kept = folder / path.name
            have = cached_digests(kept)
            sha = digests(path)[0]
            if have is None or have[0] != sha:
                kept, sha, _ = store(path, folder)
            out.append(Item(f"provision/{path.name}", "provision", kept, sha))
    return out


def check_wheelhouse(wheelhouse: Path) -> list[Path]:
    """The wheels of --provision-wheels DIR, each a wheel pip can install, provision's among them;
    BundleError otherwise (checked before anything is downloaded)."""
    from provision.bundlefile import selfwheel

    files = sorted(wheelhouse.glob("*.whl"))
    if not any(f.name.startswith("provision-") for f in files):
        raise BundleError(f"{wheelhouse} holds no provision-*.whl")
    for f in files:
        why = selfwheel.wheel_problem(f)
        if why:
            raise BundleError(f"--provision-wheels: {f} {why}; give a folder of wheels")
    return files


def installed_pins() -> str:
    """name==version of every distribution installed beside provision (pip's constraints), so a
    bundle carries the versions provision runs with here wherever the target's Python has them."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    pins = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonicalize_name(name) == "provision":
            continue
        pins[str(canonicalize_name(name))] = dist.version
    return "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()))
