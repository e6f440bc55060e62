"""A copy of the lent GPU machine's Python here, to prove the GPU check before a GPU is spent on it (`make gpu-sim`).

    python infra/gpu_sim/sim.py run [--out DIR] [--work DIR] [-- gpu_check args]   # the GPU check, CPU ranks
    python infra/gpu_sim/sim.py exec -- -c "import tasks.train.run"                 # any Python, same rules
    python infra/gpu_sim/sim.py env                                                 # build it; print its python

The environment: Python 3.12 (the machine's 3.12.3; the nearest here), the image's packages pinned in
infra/gpu_image/requirements.txt and nothing else (checked against infra/gpu_image/packages.txt), built once
into $PRETRAIN_GPU_SIM_HOME (default ~/.cache/pretrain-pipeline/gpu-sim) and reused while the pins are the
same. The carried wheels come the way they travel: `make gpu-prepare`'s .gpu/site on PYTHONPATH. The command
is the one the GPU machine runs, with --sim for CPU ranks at small sizes.

Every import that nothing here provides is recorded (import_guard.py, in every process); one asked for by
the project's own code fails the run, naming the module and the file and line that imported it.
"""
from __future__ import annotations

import argparse
import functools
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
IMAGE = ROOT / "infra" / "gpu_image"
GPU_DIR = ROOT / ".gpu"
GUARD = HERE / "import_guard.py"
MISSES_ENV = "PRETRAIN_IMPORT_MISSES"


class SimError(RuntimeError):
    pass


def find_python312() -> str:
    candidates = [os.environ.get("PYTHON312"), shutil.which("python3.12"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True),
                  "/usr/bin/python3.12", "/usr/local/bin/python3.12"]
    for path in filter(None, candidates):
        probe = subprocess.run([path, "-c", "import sys, venv; print(sys.version_info[:2] == (3, 12))"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return path
    raise SimError("no Python 3.12 with venv found (the GPU machine runs 3.12): install one (pyenv install 3.12, "
                   "or the distribution's python3.12 and python3.12-venv) or set PYTHON312=/path/to/python3.12")


def normalized(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def listed(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


@functools.cache
def image_packages() -> set[str]:
    return {normalized(name) for name in listed(IMAGE / "packages.txt")}


def env_key(python: str) -> str:
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout
    text = version + (IMAGE / "requirements.txt").read_text() + GUARD.read_text()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def outside_image(python: Path) -> list[str]:
    """Distributions in the environment that the GPU image does not hold."""
    out = subprocess.run([str(python), "-I", "-c", "import importlib.metadata as m, json; "
                          "print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()})))"],
                         capture_output=True, text=True, check=True).stdout
    return [name for name in json.loads(out) if normalized(name) not in image_packages()]


def build_env() -> Path:
    """The environment's python, built once per set of pins (minutes: torch and its CUDA libraries download)."""
    python = find_python312()
    home = Path(os.environ.get("PRETRAIN_GPU_SIM_HOME") or Path.home() / ".cache" / "pretrain-pipeline" / "gpu-sim")
    env_dir = home / env_key(python)
    if (env_dir / ".complete").is_file():
        return env_dir / "bin" / "python"
    home.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="building-", dir=home))
    print(f"gpu-sim: building {env_dir} from {IMAGE / 'requirements.txt'} (once)", flush=True)
    try:
        populate(python, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(env_dir, ignore_errors=True)
    staging.rename(env_dir)  # a venv's python finds its prefix from pyvenv.cfg beside it, wherever the folder is
    return env_dir / "bin" / "python"


def populate(python: str, staging: Path) -> None:
    subprocess.run([python, "-m", "venv", str(staging)], check=True)
    new_python = staging / "bin" / "python"
    subprocess.run([str(new_python), "-m", "pip", "install", "-q", "--no-deps", "--no-input", "-r",
                    str(IMAGE / "requirements.txt")], check=True)
    extra = outside_image(new_python)
    if extra:
        raise SimError(f"the environment holds {extra}, which the GPU image does not: remove them from "
                       f"{IMAGE / 'requirements.txt'}")
    site = subprocess.run([str(new_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    shutil.copy(GUARD, Path(site) / "pretrain_import_guard.py")
    (Path(site) / "pretrain_import_guard.pth").write_text("import pretrain_import_guard\n")
    (staging / ".complete").write_text(json.dumps({"python": python, "requirements": str(IMAGE / "requirements.txt")}))


def carried_site() -> Path:
    site = GPU_DIR / "site"
    if not (site / "deepspeed").is_dir() or not (GPU_DIR / "prepared" / "tokens").is_dir():
        raise SimError(f"{GPU_DIR} has no carried wheels or prepared tokens: run `make gpu-prepare` first")
    return site


def sim_env(python: Path, misses: Path) -> dict[str, str]:
    """The machine's environment as the GPU command sees it: its python first on PATH, the carried wheels on
    PYTHONPATH, nothing of this machine's installs."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    carried_site()
    # relative, as typed on the machine (the commands run in the repository's root)
    env.update(PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=".gpu/site",
               PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", **{MISSES_ENV: str(misses)})
    return env


# import names of image packages that differ from their distribution's name
MODULE_PACKAGE = {"PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn", "cv2": "opencv-python-headless",
                  "dateutil": "python-dateutil", "google": "protobuf", "skimage": "scikit-image"}


def on_image(module: str) -> bool:
    """A module the machine has although this environment does not install it (pyarrow asks for pandas when it
    converts, which the image holds): not a miss there."""
    return normalized(MODULE_PACKAGE.get(module, module)) in image_packages()


def project_misses(misses: Path) -> list[dict]:
    """The recorded misses whose importer is the project's own code (not a library probing for an option) and
    whose module the GPU image does not hold either."""
    if not misses.is_file():
        return []
    found, seen = [], set()
    for line in misses.read_text().splitlines():
        miss = json.loads(line)
        path = miss["importer"].rsplit(":", 1)[0]
        ours = path.startswith(str(ROOT) + os.sep) and not path.startswith(str(GPU_DIR) + os.sep)
        if ours and not on_image(miss["module"]) and (miss["module"], miss["importer"]) not in seen:
            seen.add((miss["module"], miss["importer"]))
            found.append({"module": miss["module"], "importer": os.path.relpath(path, ROOT) + ":" +
                          miss["importer"].rsplit(":", 1)[1]})
    return found


def explain(found: list[dict]) -> str:
    return "\n".join(f"error: module {m['module']!r} is neither on the GPU image (infra/gpu_image/packages.txt) nor "
                     f"carried (.gpu/site); imported by {m['importer']}. Import it where it is used, off the GPU "
                     f"path, or carry it (infra/gpu_wheels.sh)" for m in found)


def run_check(out: Path, work: Path | None, extra: list[str]) -> int:
    python = build_env()
    out.mkdir(parents=True, exist_ok=True)
    work = work or Path(tempfile.mkdtemp(prefix="gpu-sim-"))
    work.mkdir(parents=True, exist_ok=True)
    misses = work / "import-misses.jsonl"
    misses.unlink(missing_ok=True)
    cmd = [str(python), str(ROOT / "benchmarks" / "gpu_check.py"), "--sim", "--prepared", str(GPU_DIR / "prepared"),
           "--out", str(out), "--work", str(work), *extra]
    print(f"gpu-sim: PYTHONPATH=.gpu/site {' '.join(cmd)}", flush=True)
    code = subprocess.run(cmd, env=sim_env(python, misses), cwd=ROOT).returncode
    found = project_misses(misses)
    annotate(out, python, found)
    return judged(code, found)


def judged(code: int, found: list[dict]) -> int:
    """The run's exit code, or 3 when it passed but the project imported what the image lacks."""
    if found:
        print(explain(found), file=sys.stderr)
    return code or (3 if found else 0)


def annotate(out: Path, python: Path, found: list[dict]) -> None:
    """The report says where it ran: this environment, and the project's imports that failed there."""
    reports = sorted(out.glob("gpu-*.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        return
    report = json.loads(reports[-1].read_text())
    report["sim"] = {"python": str(python), "requirements": "infra/gpu_image/requirements.txt",
                     "carried": sorted(p.name for p in carried_site().iterdir() if p.is_dir() and "." not in p.name),
                     "project_import_misses": found}
    reports[-1].write_text(json.dumps(report, indent=2) + "\n")


def run_python(args: list[str]) -> int:
    python = build_env()
    with tempfile.TemporaryDirectory() as tmp:
        misses = Path(tmp) / "import-misses.jsonl"
        code = subprocess.run([str(python), *args], env=sim_env(python, misses), cwd=ROOT).returncode
        return judged(code, project_misses(misses))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the GPU check on CPU ranks in the simulated image")
    run.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results"))
    run.add_argument("--work", type=Path)
    run.add_argument("extra", nargs="*", help="more gpu_check.py arguments (after --)")
    execute = sub.add_parser("exec", help="python with these arguments in the simulated image")
    execute.add_argument("args", nargs=argparse.REMAINDER)
    sub.add_parser("env", help="build the environment and print its python")
    args = parser.parse_args()
    try:
        if args.command == "env":
            print(build_env())
            return 0
        if args.command == "exec":
            return run_python([a for a in args.args if a != "--"] if args.args[:1] == ["--"] else args.args)
        return run_check(args.out, args.work, args.extra)
    except SimError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
