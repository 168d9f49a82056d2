"""A software bill of materials of an environment: a CycloneDX JSON document, made with the
CycloneDX project's Python library (cyclonedx-python-lib, imported only here and only when a
document is made).

What it lists: every package of the lock for one platform, with its version, hashes and package
URL (`pkg:pypi/...`, `pkg:conda/...?build=&channel=&subdir=`); the NVIDIA libraries TensorFlow
loads at GPU start-up (their sonames, at the matrix's CUDA and cuDNN versions; on the system path
also NVIDIA's runfile and cuDNN archive with their checksums); and, on the document's own
component, the matrix row and the sources it cites. Nothing in it changes from run to run: no
timestamp, and a serial number derived from what it describes. `provision export --sbom` writes
it, and every bundle carries it (`sbom.cdx.json`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from provision import __version__
from provision.environment import EnvDir
from provision.errors import ProvisionError
from provision.fileio import sha256_file

if TYPE_CHECKING:
    from cyclonedx.model.component import Component

FILE_NAME = "sbom.cdx.json"
PROPERTY = "provision:"  # the prefix of provision's own property names


class SbomError(ProvisionError):
    """The bill of materials cannot be made (a lock that cannot be read)."""


def document(env: EnvDir, platform: str | None = None) -> str:
    """The CycloneDX 1.6 JSON document of `env` as its lock builds it on `platform` (a conda
    subdir; default: the spec's first)."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.tool import ToolRepository
    from cyclonedx.output import make_outputter
    from cyclonedx.schema import OutputFormat, SchemaVersion

    spec = env.spec
    subdir = platform or spec.platforms[0]
    lock_sha = sha256_file(env.lock)
    row = f"TensorFlow {spec.release.pin}, CUDA {spec.cuda.full}, cuDNN {spec.cudnn.full}"
    facts = {"path": env.path, "python": env.python, "platform": subdir, "matrix-row": row,
             "lock": env.lock.name, "lock-sha256": lock_sha}  # fmt: skip
    root = Component(
        type=ComponentType.APPLICATION, name=env.name, version=spec.release.pin,
        bom_ref=f"provision-env:{env.name}",
        description=f"TensorFlow {spec.release.pin} on the {env.path} path, Python {env.python}",
        properties=[Property(name=PROPERTY + k, value=v) for k, v in facts.items()],
        external_references=_citations(env),
    )  # fmt: skip
    components = [*_locked(env, subdir), *_nvidia(env)]
    tool = Component(type=ComponentType.APPLICATION, name="provision", version=__version__)
    bom = Bom(
        components=components,
        metadata=BomMetaData(component=root, tools=ToolRepository(components=[tool])),
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"provision-sbom:{env.name}:{subdir}:"
                                 f"{lock_sha}:{row}:{__version__}"),
    )  # fmt: skip
    # No timestamp: the same environment, the same bytes (the schema makes it optional; the
    # library's annotation does not say that None is accepted, its setter does).
    bom.metadata.timestamp = None  # type: ignore[assignment]
    bom.register_dependency(root, components)
    text = make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_6).output_as_string(indent=1)
    return text + "\n"


def _citations(env: EnvDir) -> list[Any]:
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri

    from provision import matrix

    s = env.spec
    known = matrix.load().sources
    ids = dict.fromkeys((*s.release.sources, *s.cuda.sources, *s.cudnn.sources))
    return [
        ExternalReference(type=ExternalReferenceType.DOCUMENTATION, url=XsUri(src.url),
                          comment=f"{src.id}: {src.what} (retrieved {src.retrieved})")
        for i in ids if (src := known.get(i)) is not None
    ]  # fmt: skip


def _hashes(pairs: Iterable[tuple[str, str | None]]) -> list[Any]:
    from cyclonedx.model import HashAlgorithm, HashType

    algs = {"sha256": HashAlgorithm.SHA_256, "md5": HashAlgorithm.MD5}
    return [HashType(alg=algs[alg], content=value) for alg, value in pairs if value]


def _pypi(name: str, version: str, hashes: Iterable[str], marker: str = "") -> Component:
    from cyclonedx.model import Property
    from cyclonedx.model.component import Component
    from packageurl import PackageURL

    purl = PackageURL(type="pypi", name=name.lower(), version=version)
    return Component(
        name=name, version=version, purl=purl, bom_ref=purl.to_string(),
        hashes=_hashes(("sha256", h.removeprefix("sha256:")) for h in hashes),
        properties=[Property(name=PROPERTY + "marker", value=marker)] if marker else None,
    )  # fmt: skip


def _locked(env: EnvDir, subdir: str) -> list[Component]:
    """Every package of the lock for `subdir`, conda's and pip's."""
    if not env.kind.conda_env:
        from provision.lock.requirements import parse_lock

        try:
            pins = parse_lock(env.lock.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SbomError(f"{env.lock} cannot be read for the bill of materials: {exc}") from None
        return [_pypi(p.name, p.version, p.hashes, p.marker) for p in pins]
    from cyclonedx.model.component import Component
    from packageurl import PackageURL

    from provision.lock import condafile

    out: list[Component] = []
    for p in condafile.read(env.lock, SbomError).on(subdir):
        if p.pip:
            out.append(_pypi(p.name, p.version, [p.hash.sha256] if p.hash.sha256 else []))
            continue
        parts = p.url.split("/")  # .../CHANNEL/SUBDIR/FILE
        qualifiers = {
            "build": p.build_string or "",
            "channel": parts[-3] if len(parts) > 3 else "",
            "subdir": subdir,
            "type": "conda" if p.url.endswith(".conda") else "tar.bz2",
        }
        purl = PackageURL(type="conda", name=p.name, version=p.version,
                          qualifiers={k: v for k, v in qualifiers.items() if v})  # fmt: skip
        hashes = _hashes([("sha256", p.hash.sha256), ("md5", p.hash.md5)])
        out.append(Component(name=p.name, version=p.version, purl=purl, hashes=hashes,
                             bom_ref=purl.to_string()))  # fmt: skip
    return out


def _nvidia(env: EnvDir) -> list[Component]:
    """The NVIDIA libraries TensorFlow dlopens at GPU start-up (the sonames its loader builds for
    the row's CUDA and cuDNN), and on the system path the runfile and archive they come from."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
    from cyclonedx.model.component import Component, ComponentType

    from provision.payload.cudalibs import sonames

    cuda, cudnn = env.spec.cuda, env.spec.cudnn
    loaded = sonames({}, {"cuda_version": cuda.full, "cudnn_version": cudnn.full})
    out = [
        Component(
            name=soname, group="nvidia", version=cudnn.full if lib == "cudnn" else cuda.full,
            bom_ref=f"nvidia:{soname}",
            description=f"loaded by TensorFlow {env.spec.release.pin} at GPU start-up",
            properties=[Property(name=PROPERTY + "loaded-by", value="tensorflow")],
        )
        for lib, soname in sorted(loaded.items())
    ]  # fmt: skip
    if env.kind.host_toolkit:
        files = ((cuda.runfile, cuda.full, cuda.runfile_sha256, cuda.runfile_url),
                 (cudnn.archive, cudnn.full, cudnn.sha256, cudnn.url))  # fmt: skip
        for name, version, sha, url in files:
            out.append(Component(
                type=ComponentType.FILE, name=name, group="nvidia", version=version,
                bom_ref=f"nvidia-file:{name}", hashes=_hashes([("sha256", sha)]),
                external_references=[ExternalReference(
                    type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url))],
            ))  # fmt: skip
    return out
