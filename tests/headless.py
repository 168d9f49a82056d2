"""Headless Chromium's picture of a page, the one way the tests take it: a profile and a home of
its own under the test's folder (Chromium writes ~/.config/chromium and crash reports there
otherwise), no network of its own, no first-run work."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

MISSING = "chromium is not installed (apt-get install -y chromium)"


def screenshot(page: Path, png: Path, folder: Path, size: str = "1280,720") -> str:
    """Take `page`'s picture into `png`; "" when it took one, else why not (MISSING when there is
    no Chromium). `folder` (new or empty) holds the browser's profile and home."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return MISSING
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={folder / 'profile'}", "--hide-scrollbars",
         f"--window-size={size}", f"--screenshot={png}", page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip
    ok = png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return "" if ok else f"no screenshot (exit {done.returncode}): {done.stderr[-600:]}"
