"""Verify: run an environment's smoke test inside it and compare its report with the spec; a pass
records the baseline `provision check` compares with (provision.verify.baseline: never over a
break it did not vouch for; provision.verify.changes: what changed since the baseline).

The smoke test ships once, as provision's payload (provision/payload, run from one zipapp by the
environment's own interpreter: provision.payload_app); it judges itself against the spec's
expectations, passed to it in a file. This module then judges the report's facts again against
the spec as the matrix says *now*, so a report made elsewhere (e.g. on a GPU machine, committed as
a fixture, or by an older provision) can be judged the same way. Of the payload, only its report
schema and its judgements are imported here.
Nothing here prints: `verify()` and `compare()` return a VerifyResult; the CLI picks the exit code.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provision import _proc, diskread
from provision.environment import EnvDir
from provision.errors import UsageError, VerifyError
from provision.jsontypes import JSONObject
from provision.payload import judgements
from provision.payload import report as schema
from provision.payload.status import FAIL, PASS, WARN, CheckStatus, check_status
from provision.payload_app import payload_argv, payload_env
from provision.steps import StepResult

DEFAULT_TIMEOUT = schema.DEFAULT_TIMEOUT
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
    status: CheckStatus
    reason: str

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "status": self.status, "ok": self.ok, "reason": self.reason}


# What --require-gpu turns from "skipped on a CPU host" into a failure.
GPU_ONLY = frozenset({"gpu_required", "gpus", "cuda_libraries", "cudart", "cudnn"})


@dataclass(frozen=True)
class VerifyResult:
    name: str | None
    python: str | None
    checks: tuple[Outcome, ...]
    findings: tuple[Outcome, ...]  # the report's facts against the spec
    report: JSONObject = field(repr=False)  # the smoke test's, as validate() accepted it
    # Passed, but a break it does not vouch for stands (provision.verify.baseline): what and how
    # to proceed, in one line; "" otherwise.
    still_broken: str = ""

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.checks + self.findings)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.checks + self.findings if not o.ok]

    @property
    def works_on_the_cpu(self) -> bool:
        """On a host with no GPU at all: every failure is one --require-gpu made (no GPU, and the
        CUDA libraries a GPU would load), so the environment itself runs on the CPU."""
        env = _dict(self.report.get("environment"))
        driver = _dict(env.get("driver"))
        if _list(env.get("gpus")) or driver.get("host_gpus"):
            return False
        return all(o.name in GPU_ONLY for o in self.failures)

    @property
    def cpu_only(self) -> str:
        """Why no GPU was used ("" when one was), for the last line of verify and create."""
        return cpu_only_reason(self.report)

    def as_step(self, named: str | None = None) -> StepResult:
        """The step protocol's view; named: NAME as a command needs it (with --out if any)."""
        if not self.ok:
            failed = "; ".join(f"{o.name}: {o.reason}" for o in self.failures)
            hint = f"`provision verify {named or self.name or 'NAME'}` shows the full report"
            return StepResult("verify", "failed", [failed or "the smoke test failed"], hint)
        outcomes = self.checks + self.findings
        passed = sum(1 for o in outcomes if o.status == "pass")
        tail = f"; {self.cpu_only}" if self.cpu_only else ""
        line = f"smoke test passed ({passed} of {len(outcomes)} checks pass, none fails{tail})"
        return StepResult("verify", "done", [line])

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "name": self.name,
            "python": self.python,
            "cpu_only": self.cpu_only or None,
            "checks": [o.as_json() for o in self.checks],
            "findings": [o.as_json() for o in self.findings],
            "still_broken": self.still_broken or None,
            "report": self.report,
        }


# -- comparing a report with a spec ------------------------------------------------------------


def validate(report: object) -> JSONObject:
    """The report as a dict, or VerifyError saying why it is not a smoke-test report we can read."""
    if not isinstance(report, dict) or report.get("schema") != schema.SCHEMA:
        raise VerifyError(f"not a smoke-test report (its schema is not {schema.SCHEMA!r})")
    version = report.get("schema_version")
    if not isinstance(version, int) or version > schema.SCHEMA_VERSION:
        raise VerifyError(
            f"the report has schema_version {version!r}; this provision reads up to "
            f"{schema.SCHEMA_VERSION}: upgrade provision"
        )
    if not isinstance(report.get("checks"), list):
        raise VerifyError("the report has no list of checks")
    return report


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _checks(report: Mapping[str, object]) -> tuple[Outcome, ...]:
    out = []
    for raw in _list(report["checks"]):
        if not isinstance(raw, dict):
            continue
        reason = str(raw.get("reason") or "")
        status = check_status(raw.get("status"))
        if status is None:
            status, reason = FAIL, f"unknown status {str(raw.get('status'))!r}: {reason}"
        out.append(Outcome(str(raw.get("name")), status, reason))
    names = {o.name for o in out}
    out += [
        Outcome(n, FAIL, "missing from the report")
        for n in schema.CHECKS
        if n not in names and n not in schema.ADDED_LATER
    ]
    return tuple(out)


def _details(report: Mapping[str, object], check: str) -> dict[str, object]:
    for raw in _list(report["checks"]):
        if isinstance(raw, dict) and raw.get("name") == check:
            return _dict(raw.get("details"))
    return {}


def _findings(
    report: Mapping[str, object], expected: Mapping[str, object], require_gpu: bool
) -> list[Outcome]:
    env = _dict(report.get("environment"))
    found: list[Outcome] = []

    def add(name: str, status: CheckStatus, reason: str) -> None:
        found.append(Outcome(name, status, reason))

    baked = _dict(report.get("expected"))
    stale = {
        k: (baked.get(k), expected.get(k)) for k in COMPARED if baked.get(k) != expected.get(k)
    }
    if stale:
        diff = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in ((k, *v) for k, v in stale.items()))
        add(
            "rendering",
            WARN,
            f"the smoke test expected other values than the spec now does ({diff}): re-render",
        )
    else:
        add("rendering", PASS, "the smoke test expected what the spec says")

    tf_found, tf_want = env.get("tensorflow"), expected.get("tf_version")
    if tf_want:
        if judgements.same_version(tf_found, tf_want):
            add("tensorflow", PASS, f"TensorFlow {tf_found}")
        else:
            add(
                "tensorflow",
                FAIL,
                f"TensorFlow {tf_found or 'not importable'}, the spec says {tf_want}",
            )
    py_found, py_want = str(env.get("python") or ""), expected.get("python")
    if py_want:
        if (
            judgements.same_release(py_found, py_want)
            and len(judgements.version_tuple(py_found)) >= 2
        ):
            add("python", PASS, f"Python {py_found}")
        else:
            add("python", FAIL, f"Python {py_found or '?'}, the spec says {py_want}")

    bi = _dict(env.get("build_info"))
    if bi:
        problems = []
        if expected.get("cuda") and not judgements.same_release(
            bi.get("cuda_version"), expected["cuda"]
        ):
            problems.append(
                f"built with CUDA {bi.get('cuda_version')}, the spec says {expected['cuda']}"
            )
        built_cudnn = env.get("cudnn_header") or bi.get("cudnn_version")
        if expected.get("cudnn") and not judgements.same_release(built_cudnn, expected["cudnn"]):
            problems.append(f"built with cuDNN {built_cudnn}, the spec says {expected['cudnn']}")
        if problems:
            add("build", FAIL, "; ".join(problems))
        else:
            add(
                "build",
                PASS,
                f"built with CUDA {bi.get('cuda_version')}, cuDNN {built_cudnn}",
            )

    for check, what, key in (("cudart", "CUDA runtime", "cuda"), ("cudnn", "cuDNN", "cudnn")):
        version = _details(report, check).get("version")
        want = expected.get(f"{key}_locked")
        if version and want:  # moved for another framework: the lock's, exactly
            add(f"{check}_version", *judgements.judge_locked_version(what, str(version), str(want)))
        elif version and expected.get(key):
            status, reason = judgements.judge_library_version(
                what, str(version), str(expected[key])
            )
            add(f"{check}_version", status, reason)

    gpus = _list(env.get("gpus"))
    built_for = bi.get("cuda_compute_capabilities") or expected.get("compute_targets") or []
    targets = [str(t) for t in built_for] if isinstance(built_for, (list, tuple)) else []
    minimum = expected.get("compute_min")
    for gpu in gpus:
        if isinstance(gpu, dict) and gpu.get("compute_capability"):
            status, reason = judgements.judge_compute(
                str(gpu["compute_capability"]), targets, str(minimum) if minimum else None
            )
            add(f"gpu{gpu.get('index')}_compute", status, f"{gpu.get('name')}: {reason}")
    if require_gpu and not gpus:
        add("gpu_required", FAIL, "no GPU in the report, and --require-gpu was given")

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
        have = variables.get(schema.MEMORY_LIMIT_VAR)
        if have != str(expected["gpu_memory"]):
            policy.append(f"{schema.MEMORY_LIMIT_VAR}={have!r}, spec {expected['gpu_memory']}")
    if expected.get("gpus") or expected.get("gpu_memory"):
        add(
            "gpu_policy",
            FAIL if policy else PASS,
            "; ".join(policy) or "the environment's policy is in effect",
        )
    return found


def compare(
    report: object,
    expected: Mapping[str, object] | None = None,
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
            Outcome("gpu_required", FAIL, "no GPU in the report, and --require-gpu was given")
        )
    return VerifyResult(
        name=name,
        python=str(env.get("executable")) if env.get("executable") else None,
        checks=_checks(data),
        findings=tuple(findings),
        report=data,
    )


# -- running the smoke test inside an environment ----------------------------------------------


def smoke_argv(
    python: Path, *, timeout: float, require_gpu: bool, expected_file: Path
) -> list[str]:
    """The payload's smoke test, run by `python`, judging by the expectations in expected_file."""
    args = ["--json", "--timeout", f"{timeout:g}", "--expected", str(expected_file)]
    if require_gpu:
        args.append("--require-gpu")
    return payload_argv(python, "smoke", args, expected_file.parent)


def _answers(python: Path, env: Mapping[str, str] | None, timeout: float) -> None:
    """The interpreter starts and answers within one check's deadline (an interpreter that never
    answers is told apart from a slow smoke test before the long deadline starts)."""
    from provision.errors import ProvisionError

    try:
        done = _proc.run(
            [str(python), "-I", "-c", "print('provision-ok')"], env=env, timeout=timeout,
            check=False, group=True,
        )  # fmt: skip
    except ProvisionError as exc:
        raise VerifyError(
            f"{python} did not answer within {timeout:g} s (--timeout); is it a Python interpreter?"
        ) from exc
    if "provision-ok" not in done.stdout:
        raise VerifyError(
            f"{python} is not a working Python interpreter (exit {done.returncode}): "
            f"{done.last_line()[-300:]}"
        )


def run_smoke(
    python: Path,
    *,
    expected: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    require_gpu: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> JSONObject:
    """Run the payload's smoke test with `python` and return its report (VerifyError when there is
    none). `expected`: the spec's expectations; without them only the report's own checks judge."""
    if not Path(python).exists():
        raise VerifyError(f"{python} does not exist")
    if timeout <= 0:
        raise UsageError("--timeout must be positive")
    with tempfile.TemporaryDirectory(prefix="provision-verify-") as tmp:
        expected_file = Path(tmp) / "expected.json"
        expected_file.write_text(json.dumps(dict(expected or {}), sort_keys=True), encoding="utf-8")
        argv = smoke_argv(
            Path(python), timeout=timeout, require_gpu=require_gpu, expected_file=expected_file
        )
        _answers(Path(python), env, timeout)
        # Each check may use its deadline, and a hang costs a fresh TensorFlow start besides; the
        # whole process group goes when this one deadline passes.
        done = _proc.run(
            argv, env={**(env or {}), **payload_env(Path(tmp))},
            timeout=timeout * (2 * len(schema.CHECKS) + 2), check=False, group=True,
        )  # fmt: skip
    try:
        report = diskread.loads_json(done.stdout, "the smoke test's report")
    except ValueError:
        raise VerifyError(
            f"the smoke test printed no report (exit {done.returncode}): {done.last_line()[-300:]}"
        ) from None
    return validate(report)


def verify(
    env: EnvDir | None = None,
    *,
    python: Path | None = None,
    prefix: Path | None = None,
    require_gpu: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> VerifyResult:
    """Run the smoke test with the environment's interpreter, as users run it: no activation.

    env: judge against its spec (else only the report's own checks). The interpreter is `python`,
    else `prefix`/bin/python. A verify of a registered environment's own interpreter is recorded.
    """
    from provision import environment, registry

    if python is None and prefix is None:
        raise UsageError("give an environment NAME, --prefix DIR or --python EXE")
    exe = Path(python) if python is not None else environment.interpreter(Path(prefix or "."))
    if not exe.exists():
        hint = f"build it with `provision install {env.name}`, or " if env else ""
        raise VerifyError(f"no interpreter at {exe}: {hint}point at one with --python EXE")
    expected = expected_of(env) if env is not None else None
    report = run_smoke(exe, expected=expected, require_gpu=require_gpu, timeout=timeout)
    result = compare(report, expected, require_gpu=require_gpu, name=env.name if env else None)
    if env is not None:
        record = registry.get(env.name)
        if record is not None and Path(record.interpreter) == exe.absolute():
            gpus = len(_list(_dict(result.report.get("environment")).get("gpus")))
            failed = ", ".join(o.name for o in result.failures)
            cpu_ok = require_gpu and not result.ok and result.works_on_the_cpu
            summary = "PASS" if result.ok else f"FAIL: {failed}"
            if cpu_ok:
                summary = f"CPU ok; --require-gpu FAIL: {failed}"
            if result.cpu_only:
                summary += f" ({result.cpu_only})"
            registry.set_verify(
                env.name, registry.LastVerify(result.ok, gpus, summary, time.time(), cpu_ok)
            )
            if result.ok:  # the facts `provision check` compares with later
                from dataclasses import replace

                from provision.verify import baseline

                standing = baseline.record_after(env.name, "verify", gpus)
                if standing:
                    by = (
                        f"a smoke test on {gpus} GPU(s)" if gpus else "a smoke test on the CPU only"
                    )
                    line = baseline.still_broken_line(env.name, standing, by)
                    result = replace(result, still_broken=line)
    return result


def expected_of(env: EnvDir) -> dict[str, object]:
    """What the smoke test must find: the spec's expectations, as the matrix says now."""
    from provision.matrix import spec

    expected = spec.expected(env.spec)
    from provision.lock.userlock import locked_libraries

    for key, version in locked_libraries(env).items():
        expected[f"{key}_locked"] = version
    return expected


def cpu_only_reason(report: Mapping[str, object]) -> str:
    """ "" when TensorFlow used a GPU; otherwise why it ran on the CPU only, in a few words."""
    env = _dict(report.get("environment"))
    if _list(env.get("gpus")):
        return ""
    driver = _dict(env.get("driver"))
    error = str(driver.get("error") or "")
    if "libcuda" in error:
        why = "no NVIDIA driver"
    elif "CUDA_ERROR_NO_DEVICE" in error or "no CUDA device" in error:
        why = "the driver sees no GPU"
    elif error:
        why = error
    elif driver.get("host_gpus"):
        why = f"TensorFlow registered none of the host's {driver['host_gpus']} GPU(s)"
    else:
        why = "no GPU"
    return f"CPU only: {why}"
