"""What travels to a GPU machine without network (`make gpu-prepare`): the carried wheels, installed into
.gpu/site for PYTHONPATH, and the demo corpus's tokens prepared in .gpu/prepared; within the 64 MiB a lent
machine takes (the working tree and these together).

    python infra/gpu_prepare.py            # after `make install`; reuses what is already there

On the machine (no install step):

    PYTHONPATH=.gpu/site python3 benchmarks/gpu_check.py --prepared .gpu/prepared --out "$OUT"
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_DIR = ROOT / ".gpu"
TRAVEL_LIMIT_MIB = 64
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def wheels_key() -> str:
    """What the wheels depend on: the script that picks them and the pins it reads."""
    text = (ROOT / "infra" / "gpu_wheels.sh").read_text() + (ROOT / "Makefile").read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_wheels(python: str) -> Path:
    wheels, stamp = GPU_DIR / "wheels", GPU_DIR / "wheels.key"
    if stamp.is_file() and stamp.read_text() == wheels_key() and any(wheels.glob("*.whl")):
        return wheels
    subprocess.run(["rm", "-rf", str(wheels)], check=True)
    subprocess.run(["bash", str(ROOT / "infra" / "gpu_wheels.sh"), str(wheels)], check=True,
                   env={**os.environ, "PYTHON": python})
    stamp.write_text(wheels_key())
    return wheels


def install_site(wheels: Path, python: str) -> Path:
    """The wheels unpacked for Python 3.12 on x86-64 Linux, as `pip install --target` lays them out."""
    site, stamp = GPU_DIR / "site", GPU_DIR / "site.key"
    key = hashlib.sha256("".join(sorted(p.name for p in wheels.glob("*.whl"))).encode()).hexdigest()[:12]
    if stamp.is_file() and stamp.read_text() == key and site.is_dir():
        return site
    subprocess.run(["rm", "-rf", str(site)], check=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
                    str(site), "--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
                    *platforms, *map(str, sorted(wheels.glob("*.whl")))], check=True)
    stamp.write_text(key)
    return site


def prepare_tokens(python: str) -> Path:
    prepared = GPU_DIR / "prepared"
    if (prepared / "tokens" / "manifest.json").is_file() and (prepared / "tokenizer" / "report.json").is_file():
        return prepared
    subprocess.run(["rm", "-rf", str(prepared)], check=True)
    subprocess.run([python, str(ROOT / "benchmarks" / "gpu_check.py"), "--prepare-only", str(prepared)], check=True)
    subprocess.run(["rm", "-rf", str(prepared / "clean")], check=True)  # the checks read tokenizer/ and tokens/
    return prepared


def travel_bytes() -> int:
    """The working tree that a lent machine receives (tracked and untracked-not-ignored files) plus .gpu/site and
    .gpu/prepared, which a run carries."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.split(b"\0")
    files = [ROOT / name.decode() for name in listed if name]
    files += [p for folder in ("site", "prepared") for p in (GPU_DIR / folder).rglob("*")]
    return sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the project's full install (make install)")
    args = parser.parse_args()
    if not Path(args.python).exists():
        print(f"error: {args.python} not found; run `make install` first", file=sys.stderr)
        return 2
    GPU_DIR.mkdir(exist_ok=True)
    site = install_site(build_wheels(args.python), args.python)
    prepared = prepare_tokens(args.python)
    size = travel_bytes() / 2**20
    print(f"carried: {site} ({', '.join(sorted(p.name for p in site.iterdir() if p.is_dir() and '.' not in p.name))}), "
          f"prepared tokens: {prepared}; the working tree with them: {size:.1f} MiB of {TRAVEL_LIMIT_MIB}")
    if size > TRAVEL_LIMIT_MIB:
        print(f"error: {size:.1f} MiB would travel, over the {TRAVEL_LIMIT_MIB} MiB a lent machine takes; "
              f"remove untracked files from the working tree or carry less", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
