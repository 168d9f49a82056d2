"""The environment's GPU memory policy applied to TensorFlow: the one code path that the start-up
hook (provision_env_hook), the smoke test and the benchmark share.

TensorFlow takes a device's memory settings only before it initialises (its first op), and only
one kind per device: a logical device configuration (a hard memory limit) or memory growth, never
both ("Cannot set memory growth on device when virtual devices configured"). So `apply` decides
once per device, from what is already configured there, and never changes a device that already
has a setting: a second application (the hook applied the limit when TensorFlow was imported, then
the benchmark asks again) finds it in effect and does nothing. A setting TensorFlow refuses (it
was initialised before) is recorded, not raised.

The policy comes from the variables the environment sets (the hook or activation): a limit in
PROVISION_GPU_MEMORY_LIMIT_MIB, or TF_FORCE_GPU_ALLOW_GROWTH=true, which TensorFlow applies itself
when it initialises. The smoke test and the benchmark ask for growth where the environment sets no
limit (they must not take the whole GPU); the hook does not.

Standard library only, Python >= 3.8, and no import of provision: `provision install` copies this
file next to the hook as provision_gpu_policy, and the payload imports it as its own module.
For tests on hosts without a GPU, PROVISION_GPU_POLICY_DEVICE=CPU applies the policy to the CPU's
physical devices instead: a limit becomes one logical CPU device (TensorFlow has no memory limit
for CPUs), enough for TensorFlow to enforce the same ordering rules on them.
"""

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

LIMIT_VAR = "PROVISION_GPU_MEMORY_LIMIT_MIB"
GROWTH_VAR = "TF_FORCE_GPU_ALLOW_GROWTH"
DEVICE_VAR = "PROVISION_GPU_POLICY_DEVICE"  # tests: CPU
LIMIT, GROWTH, NONE = "limit", "growth", "none"
INSTALLED = "provision_gpu_policy"  # this module's name where install puts it, next to the hook
# Who set each device in this process: this copy's, and the installed copy's (the hook's).
SET_BY: Dict[str, str] = {}


def _who_set(name: str) -> str:
    for module in (sys.modules.get(INSTALLED), sys.modules.get(__name__)):
        found = getattr(module, "SET_BY", {}).get(name)
        if found:
            return str(found)
    return "already set"


def requested(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, Optional[int]]:
    """(LIMIT, MiB), (GROWTH, None) or (NONE, None); ValueError for a limit that is no count."""
    env = os.environ if environ is None else environ
    raw = env.get(LIMIT_VAR, "").strip()
    if raw:
        try:
            mib = int(raw)
        except ValueError:
            raise ValueError(f"{LIMIT_VAR}={raw!r} is not a number of MiB") from None
        if mib < 1:
            raise ValueError(f"{LIMIT_VAR}={raw!r} is not a number of MiB")
        return LIMIT, mib
    if env.get(GROWTH_VAR, "").strip().lower() == "true":
        return GROWTH, None
    return NONE, None


def _devices(tf: Any) -> List[Any]:
    kind = "CPU" if os.environ.get(DEVICE_VAR) == "CPU" else "GPU"
    return list(tf.config.list_physical_devices(kind))


def _configuration(tf: Any, device: Any, mib: int) -> List[Any]:
    if device.device_type == "CPU":  # tests only (DEVICE_VAR): no memory limit on CPU devices
        return [tf.config.LogicalDeviceConfiguration()]
    return [tf.config.LogicalDeviceConfiguration(memory_limit=mib)]


def _limited(device: Any, mib: Optional[int]) -> str:
    """What the policy's limit looks like in effect on this device (see in_effect)."""
    return f"limit {mib} MiB" if device.device_type == "GPU" else "1 logical device"


def _growth(tf: Any, device: Any) -> bool:
    try:
        return bool(tf.config.experimental.get_memory_growth(device))
    except (KeyError, ValueError, AttributeError):
        return False


def in_effect(tf: Any, device: Any) -> str:
    """What a device is set to: "limit N MiB", "N logical devices", "growth" or "default"."""
    conf = tf.config.get_logical_device_configuration(device)
    if conf:
        limits = [getattr(c, "memory_limit", None) for c in conf]
        if len(limits) == 1 and limits[0]:
            return f"limit {int(limits[0])} MiB"
        return "{} logical device{}".format(len(limits), "s" if len(limits) > 1 else "")
    return GROWTH if _growth(tf, device) else "default"


def apply(tf: Any, growth_by_default: bool, by: str) -> Dict[str, Any]:
    """Apply the policy to every GPU where nothing is configured yet; say what is in effect.

    growth_by_default: memory growth where the environment sets no limit (smoke test, benchmark).
    by: who applies it, recorded for the devices this call set. Never raises for TensorFlow's
    refusals: they go into "errors", one line each."""
    record: Dict[str, Any] = {
        "policy": NONE,
        "limit_mib": None,
        "devices": {},  # device name -> what is in effect
        "set_by": {},  # device name -> who set it (this call), or "already set" before it
        "errors": [],
    }
    try:
        kind, mib = requested()
    except ValueError as exc:
        record["errors"].append(str(exc))
        return record
    record["policy"], record["limit_mib"] = kind, mib
    if kind != LIMIT and not growth_by_default:
        return record  # growth: TensorFlow reads TF_FORCE_GPU_ALLOW_GROWTH when it initialises
    try:
        devices = _devices(tf)
    except Exception as exc:
        record["errors"].append(f"listing devices: {type(exc).__name__}: {exc}")
        return record
    for device in devices:
        name = device.name
        before = in_effect(tf, device)
        try:
            if before != "default":
                record["set_by"][name] = _who_set(name)
                if kind == LIMIT and before != _limited(device, mib):
                    record["errors"].append(
                        f"{name}: {before} was set before the policy's limit of {mib} MiB; "
                        "left as it is"
                    )
            elif kind == LIMIT:
                assert mib is not None
                tf.config.set_logical_device_configuration(device, _configuration(tf, device, mib))
                record["set_by"][name] = SET_BY[name] = by
            elif device.device_type == "GPU":
                tf.config.experimental.set_memory_growth(device, True)
                record["set_by"][name] = SET_BY[name] = by
        except (RuntimeError, ValueError) as exc:  # TensorFlow was initialised before this
            record["errors"].append(f"{name}: {str(exc).strip().splitlines()[0]}")
        record["devices"][name] = in_effect(tf, device)
    return record


def summary(record: Mapping[str, Any]) -> str:
    """One line: what is in effect on the devices, who set it, what the environment asks for."""
    kind = record.get("policy")
    asked = {
        LIMIT: "a limit of {} MiB per GPU".format(record.get("limit_mib")),
        GROWTH: "memory growth",
    }.get(str(kind), "no policy")
    devices = record.get("devices") or {}
    errors = record.get("errors") or []
    if devices:
        who = sorted(set((record.get("set_by") or {}).values()))
        text = "GPU memory: {} on {} device(s){} (asked for: {})".format(
            ", ".join(sorted(set(devices.values()))),
            len(devices),
            ", set by " + ", ".join(who) if who else "",
            asked,
        )
    elif kind == NONE and not errors:
        return ""
    else:
        text = f"GPU memory: asked for {asked}; no GPU to apply it to"
    return text + ("; " + "; ".join(errors) if errors else "")
