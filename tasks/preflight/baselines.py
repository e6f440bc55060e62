"""Expected values per hardware profile, and grading a measurement against them."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

PASS, WARN, FAIL = "pass", "warn", "fail"
LOWER_IS_BETTER = {"max_comm_share"}


def load_profiles(path: str | None = None) -> dict[str, dict]:
    text = Path(path).read_text() if path else (resources.files("tasks.preflight") / "baselines" / "profiles.yaml").read_text()
    profiles = yaml.safe_load(text) or {}
    for name, profile in profiles.items():
        for key, limits in profile.items():
            if key != "description" and not (isinstance(limits, dict) and {"pass", "warn"} <= set(limits)):
                raise ValueError(f"baseline profile {name!r}, {key}: expected {{pass: X, warn: Y}}, got {limits!r}"
                                 f"{' in ' + path if path else ''}")
    return profiles


def profile(name: str, path: str | None = None) -> dict:
    profiles = load_profiles(path)
    if name not in profiles:
        raise ValueError(f"preflight.profile={name!r} is not in {path or 'the shipped baselines'}; "
                         f"choose one of {sorted(profiles)} or add it to a file named by preflight.baselines_file")
    return profiles[name]


def grade(measured: float, limits: dict, key: str, scale: float = 1.0) -> tuple[str, str]:
    """(status, expected text) of a measurement; `scale` multiplies per-NIC limits by the NIC count."""
    good, okay = limits["pass"] * scale, limits["warn"] * scale
    if key in LOWER_IS_BETTER:
        status = PASS if measured <= good else WARN if measured <= okay else FAIL
        return status, f"<= {good:g} (warn above, fail above {okay:g})"
    status = PASS if measured >= good else WARN if measured >= okay else FAIL
    return status, f">= {good:g} (warn below, fail below {okay:g})"
