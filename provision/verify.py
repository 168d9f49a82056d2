"""Verify: run an environment's smoke test inside it and compare its report with the spec.

The smoke test (provision/smoke_test.py, rendered into envs/<name>/smoke_test.py with the versions
it must find) judges itself against the expectations baked into it. This module runs it with the
environment's own interpreter and activation variables, then judges the report's facts again
against the spec as the matrix says *now* (a stale rendering shows up here), so a report made
elsewhere (e.g. on a GPU machine, committed as a fixture) can be judged the same way.
Nothing here prints: `verify()` and `compare()` return a VerifyResult; the CLI picks the exit code.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import _proc
from provision import smoke_test as st
from provision.errors import UsageError, VerifyError

SMOKE_TEST = Path(st.__file__)
DEFAULT_TIMEOUT = st.DEFAULT_TIMEOUT
MANIFEST = "provision.json"
# The expectations the spec decides; the others (schema, name, path) only label the rendering.
COMPARED = (
    "tf_version",
    "python",
    "cuda",
    "cudnn",
    "compute_min",
    "compute_targets",
    "gpu_memory",
    "gpus",
)


@dataclass(frozen=True)
class Outcome:
    """One named result: a smoke-test check, or a fact of the report compared with the spec."""

    name: str
    status: str  # pass | warn | skip | fail
    reason: str

    @property
    def ok(self) -> bool:
        return self.status != st.FAIL

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "status": self.status, "ok": self.ok, "reason": self.reason}


@dataclass(frozen=True)
class VerifyResult:
    name: str | None
    python: str | None
    checks: tuple[Outcome, ...]
    findings: tuple[Outcome, ...]  # the report's facts against the spec
    report: dict[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.checks + self.findings)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.checks + self.findings if not o.ok]

    def lines(self) -> list[str]:
        out = st.render_text(self.report).rstrip("\n").splitlines()
        if self.findings:
            out.append(f"compared with the spec{f' of {self.name}' if self.name else ''}:")
            out += [f"  {o.status.upper():<4}  {o.name:<18} {o.reason}" for o in self.findings]
        verdict = "PASS" if self.ok else "FAIL"
        bad = ", ".join(o.name for o in self.failures)
        out.append(f"verify: {verdict}" + (f" ({bad})" if bad else ""))
        return out

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "name": self.name,
            "python": self.python,
            "checks": [o.as_json() for o in self.checks],
            "findings": [o.as_json() for o in self.findings],
            "report": self.report,
        }


# -- comparing a report with a spec ------------------------------------------------------------


def validate(report: object) -> dict[str, Any]:
    """The report as a dict, or VerifyError saying why it is not a smoke-test report we can read."""
    if not isinstance(report, dict) or report.get("schema") != st.SCHEMA:
        raise VerifyError(f"not a smoke-test report (its schema is not {st.SCHEMA!r})")
    version = report.get("schema_version")
    if not isinstance(version, int) or version > st.SCHEMA_VERSION:
        raise VerifyError(
            f"the report has schema_version {version!r}; this provision reads up to "
            f"{st.SCHEMA_VERSION}: upgrade provision"
        )
    if not isinstance(report.get("checks"), list):
        raise VerifyError("the report has no list of checks")
    return report


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _checks(report: Mapping[str, Any]) -> tuple[Outcome, ...]:
    out = []
    for raw in report["checks"]:
        if not isinstance(raw, dict):
            continue
        status = str(raw.get("status"))
        reason = str(raw.get("reason") or "")
        if status not in st.STATUSES:
            status, reason = st.FAIL, f"unknown status {status!r}: {reason}"
        out.append(Outcome(str(raw.get("name")), status, reason))
    names = {o.name for o in out}
    out += [Outcome(n, st.FAIL, "missing from the report") for n in st.CHECKS if n not in names]
    return tuple(out)


def _details(report: Mapping[str, Any], check: str) -> dict[str, Any]:
    for raw in report["checks"]:
        if isinstance(raw, dict) and raw.get("name") == check:
            details = raw.get("details")
            return details if isinstance(details, dict) else {}
    return {}


def _findings(
    report: Mapping[str, Any], expected: Mapping[str, Any], require_gpu: bool
) -> list[Outcome]:
    env = _dict(report.get("environment"))
    found: list[Outcome] = []

    def add(name: str, status: str, reason: str) -> None:
        found.append(Outcome(name, status, reason))

    baked = _dict(report.get("expected"))
    stale = {
        k: (baked.get(k), expected.get(k)) for k in COMPARED if baked.get(k) != expected.get(k)
    }
    if stale:
        diff = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in ((k, *v) for k, v in stale.items()))
        add(
            "rendering",
            st.WARN,
            f"the smoke test expected other values than the spec now does ({diff}): re-render",
        )
    else:
        add("rendering", st.PASS, "the smoke test expected what the spec says")

    tf_found, tf_want = env.get("tensorflow"), expected.get("tf_version")
    if tf_want:
        if tf_found == tf_want:
            add("tensorflow", st.PASS, f"TensorFlow {tf_found}")
        else:
            add(
                "tensorflow",
                st.FAIL,
                f"TensorFlow {tf_found or 'not importable'}, the spec says {tf_want}",
            )
    py_found, py_want = str(env.get("python") or ""), expected.get("python")
    if py_want:
        if st.same_release(py_found, py_want) and len(st.version_tuple(py_found)) >= 2:
            add("python", st.PASS, f"Python {py_found}")
        else:
            add("python", st.FAIL, f"Python {py_found or '?'}, the spec says {py_want}")

    bi = _dict(env.get("build_info"))
    if bi:
        problems = []
        if expected.get("cuda") and not st.same_release(bi.get("cuda_version"), expected["cuda"]):
            problems.append(
                f"built with CUDA {bi.get('cuda_version')}, the spec says {expected['cuda']}"
            )
        built_cudnn = env.get("cudnn_header") or bi.get("cudnn_version")
        if expected.get("cudnn") and not st.same_release(built_cudnn, expected["cudnn"]):
            problems.append(f"built with cuDNN {built_cudnn}, the spec says {expected['cudnn']}")
        if problems:
            add("build", st.FAIL, "; ".join(problems))
        else:
            add("build", st.PASS, f"built with CUDA {bi.get('cuda_version')}, cuDNN {built_cudnn}")

    for check, what, key in (("cudart", "CUDA runtime", "cuda"), ("cudnn", "cuDNN", "cudnn")):
        version = _details(report, check).get("version")
        if version and expected.get(key):
            status, reason = st.judge_library_version(what, str(version), str(expected[key]))
            add(f"{check}_version", status, reason)

    gpus = _list(env.get("gpus"))
    targets = list(bi.get("cuda_compute_capabilities") or expected.get("compute_targets") or [])
    for gpu in gpus:
        if isinstance(gpu, dict) and gpu.get("compute_capability"):
            status, reason = st.judge_compute(
                str(gpu["compute_capability"]), targets, expected.get("compute_min")
            )
            add(f"gpu{gpu.get('index')}_compute", status, f"{gpu.get('name')}: {reason}")
    if require_gpu and not gpus:
        add("gpu_required", st.FAIL, "no GPU in the report, and --require-gpu was given")

    variables = _dict(env.get("variables"))
    policy = []
    if expected.get("gpus") and variables.get("CUDA_VISIBLE_DEVICES") != expected["gpus"]:
        policy.append(
            f"CUDA_VISIBLE_DEVICES={variables.get('CUDA_VISIBLE_DEVICES')!r}, "
            f"spec {expected['gpus']!r}"
        )
    if (
        expected.get("gpu_memory") == "growth"
        and variables.get("TF_FORCE_GPU_ALLOW_GROWTH") != "true"
    ):
        policy.append("TF_FORCE_GPU_ALLOW_GROWTH is not 'true'")
    elif expected.get("gpu_memory") not in (None, "growth"):
        have = variables.get(st.MEMORY_LIMIT_VAR)
        if have != str(expected["gpu_memory"]):
            policy.append(f"{st.MEMORY_LIMIT_VAR}={have!r}, spec {expected['gpu_memory']}")
    if expected.get("gpus") or expected.get("gpu_memory"):
        add(
            "gpu_policy",
            st.FAIL if policy else st.PASS,
            "; ".join(policy) or "the activation set the policy",
        )
    return found


def compare(
    report: object,
    expected: Mapping[str, Any] | None = None,
    *,
    require_gpu: bool = False,
    name: str | None = None,
) -> VerifyResult:
    """Judge a smoke-test report: its own checks, and its facts against `expected` (the spec's)."""
    data = validate(report)
    env = _dict(data.get("environment"))
    findings = _findings(data, expected, require_gpu) if expected else []
    if not expected and require_gpu and not (env.get("gpus") or []):
        findings.append(
            Outcome("gpu_required", st.FAIL, "no GPU in the report, and --require-gpu was given")
        )
    return VerifyResult(
        name=name,
        python=str(env.get("executable")) if env.get("executable") else None,
        checks=_checks(data),
        findings=tuple(findings),
        report=data,
    )


# -- running the smoke test inside an environment ----------------------------------------------


def expected_for(env_dir: Path) -> dict[str, Any]:
    """The spec's expectations for a rendered environment, from its provision.json request."""
    from provision import matrix, spec

    manifest = env_dir / MANIFEST
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        request = data.get("request", data)
        gpu = spec.GpuPolicy(memory=request.get("gpu_memory"), devices=request.get("gpus"))
        env_spec = spec.resolve(
            matrix.load(),
            str(request["tf"]),
            str(request["path"]),
            str(request["python"]),
            str(request.get("name") or env_dir.name),
            gpu,
        )
    except FileNotFoundError as exc:
        raise VerifyError(
            f"{env_dir} has no {MANIFEST}: render it first (provision render --tf X.Y --name "
            f"{env_dir.name})"
        ) from exc
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise VerifyError(f"{manifest} is not a provision manifest ({exc}); re-render it") from exc
    return spec.expected(env_spec)


def smoke_argv(
    python: Path, smoke: Path, *, timeout: float, require_gpu: bool, expected_file: Path | None
) -> list[str]:
    argv = [str(python), str(smoke), "--json", "--timeout", f"{timeout:g}"]
    if require_gpu:
        argv.append("--require-gpu")
    if expected_file is not None:
        argv += ["--expected", str(expected_file)]
    return argv


def run_smoke(
    python: Path,
    *,
    smoke: Path = SMOKE_TEST,
    expected: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    require_gpu: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """Run a smoke test with `python` and return its report (VerifyError when there is none)."""
    if not Path(python).exists():
        raise VerifyError(f"{python} does not exist")
    if timeout <= 0:
        raise UsageError("--timeout must be positive")
    with tempfile.TemporaryDirectory(prefix="provision-verify-") as tmp:
        expected_file = None
        if expected is not None:
            expected_file = Path(tmp) / "expected.json"
            expected_file.write_text(json.dumps(dict(expected), sort_keys=True), encoding="utf-8")
        argv = smoke_argv(
            Path(python),
            smoke,
            timeout=timeout,
            require_gpu=require_gpu,
            expected_file=expected_file,
        )
        # Each check may use its deadline, and a hang costs a fresh TensorFlow start besides.
        done = _proc.run(argv, env=env, timeout=timeout * (2 * len(st.CHECKS) + 2), check=False)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise VerifyError(
            f"the smoke test printed no report (exit {done.returncode}): {done.last_line()[-300:]}"
        ) from None
    return validate(report)


def verify(
    name: str | None = None,
    *,
    out: Path = Path("envs"),
    python: Path | None = None,
    prefix: Path | None = None,
    require_gpu: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> VerifyResult:
    """Run the smoke test of envs/NAME inside its environment (or with `python`) and judge it."""
    from provision import install

    if name is None and python is None:
        raise UsageError("give an environment NAME, or --python EXE")
    expected: dict[str, Any] | None = None
    smoke, pass_expected = SMOKE_TEST, False
    env: dict[str, str] = {}
    if name is not None:
        env_dir = Path(out) / name
        expected = expected_for(env_dir)
        rendered = env_dir / "smoke_test.py"
        smoke, pass_expected = (rendered, False) if rendered.is_file() else (SMOKE_TEST, True)
        if python is None:
            python, env = install.locate(env_dir, prefix)
        elif prefix is not None:
            env = install.activation_env(env_dir, prefix)
    elif prefix is not None and python is None:
        python = install.interpreter(prefix)
    assert python is not None
    report = run_smoke(
        python,
        smoke=smoke,
        expected=expected if pass_expected else None,
        env=env,
        require_gpu=require_gpu,
        timeout=timeout,
    )
    return compare(report, expected, require_gpu=require_gpu, name=name)


def report_of(env_dir: Path, prefix: Path, *, require_gpu: bool = False) -> dict[str, object]:
    """verify() of a built environment as JSON (`ok`, checks, findings, the report): for create."""
    env_dir = Path(env_dir)
    result = verify(env_dir.name, out=env_dir.parent, prefix=Path(prefix), require_gpu=require_gpu)
    return result.as_json()
