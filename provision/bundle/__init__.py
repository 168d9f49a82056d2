"""Offline bundles: one archive that builds an environment on a machine with no network, and the
install from it. The container itself (format, parts, provision's wheel) is bundlefile's.

Modules: `make` (`provision bundle NAME`: what goes in, checked against the lock, written beside
the final name and renamed into place), `bundle_fetch` (the lock's wheels, conda packages and
NVIDIA's toolkit files gathered through a cache), `bundle_self` (provision's own wheels and its
dependencies' for the target's Python), `unbundle` (`provision install --from-bundle`: preflight,
checked unpacking, the build with no index and no channel, the smoke test).
"""
