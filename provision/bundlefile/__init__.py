"""The bundle container: what an offline bundle is on disk, and provision's own wheel for hosts
that lack it; low in the house, so that making bundles, installing from them and the fleet's
roll-out all read one format.

Modules: `bundle_format` (the tar's layout: the manifest first, its members, fixed headers, the
parts of a split bundle), `bundle_io` (a bundle's bytes written as one file or as parts, and read
back across parts, each checked as it goes), `selfwheel` (a wheel of the running provision, built
from the package itself, templates included, with no build backend and no network).
"""
