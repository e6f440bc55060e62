"""Train stage: turn the config into a DeepSpeed config and spec, launch the ranks, watch them."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable

from model.checkpoint import latest_complete, read_meta
from model.protocol import (EVENTS_FILE, EXIT_ANOMALY, EXIT_CONFIG, EXIT_DONE, EXIT_HUNG, EXIT_STOPPED, EXIT_UNSAVED,
                            EXIT_UNUSABLE, read_jsonl)
from model.spec import Overrides
from pretrain import PROJECT_ROOT
from pretrain.config import ModelConfig, TrainConfig
from tasks.common.lifetime import kill_group, sigterm_on_parent_death, stop_gracefully
from tasks.common.failures import transient_text
from tasks.train.hang import FrozenJobMonitor, archive_hang, describe, hang_report
from tasks.common.hosts import on_node, read_hostfile
from tasks.train.launch import (LaunchFailed, RemoteRanks, env_with_file, hostfile_for, master_address, node_commands,
                                run_nodes, secrets_for_ranks, sigterm_kills)
from tasks.common.ports import free_port
from tasks.train.rendezvous import PortUnavailable, is_local, master_port
from tasks.train.comm_plan import plan_launch, render
from tasks.train.spec import write_spec


PROGRAM = "model.train"  # the module every rank runs
LOCAL_LAUNCHER = "tasks.train.local_launcher"


class TrainingFailed(RuntimeError):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def deepspeed_binary() -> str:
    deepspeed = shutil.which("deepspeed", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if deepspeed is None:
        raise TrainingFailed("the `deepspeed` launcher is not installed in this environment; run `make install`", EXIT_CONFIG)
    return deepspeed


def launcher_command(train: TrainConfig, spec_path: Path, hostfile: Path | None = None, port: int | None = None) -> list[str]:
    """`deepspeed` across the hostfile's nodes; on this node alone, DeepSpeed's per-node launcher directly, with the
    world info `deepspeed --num_gpus N` would give it (devices 0..N-1; it sets CUDA_VISIBLE_DEVICES from them)."""
    cluster = train.cluster
    port = str(port or cluster.master_port or free_port())
    program = ["--module", PROGRAM, "--spec", str(spec_path)]
    if hostfile is None:
        world = base64.urlsafe_b64encode(json.dumps({"localhost": list(range(cluster.num_gpus))}).encode()).decode()
        return [sys.executable, "-u", "-m", LOCAL_LAUNCHER, f"--world_info={world}", "--master_addr=127.0.0.1",
                f"--master_port={port}", *program]
    cmd = [deepspeed_binary(), "--master_port", port, "--hostfile", str(hostfile), "--launcher", cluster.ssh_launcher]
    return cmd + (["--master_addr", cluster.master_addr] if cluster.master_addr else []) + program


def launcher_env(train: TrainConfig, mlflow_env: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **mlflow_env, "PYTHONUNBUFFERED": "1"}
    if train.cluster.accelerator == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
        env.setdefault("OMP_NUM_THREADS", "1")
    # the ranks import model.train from the project, wherever the launcher runs
    root = str(PROJECT_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_launcher(cmd: list[str], env: dict[str, str], log_line: Callable[[str], None], log_path: Path,
                 tail: deque | None = None, clean: Callable[[str], str] = lambda line: line,
                 stop_grace_s: float = 300.0) -> int:
    """Run the DeepSpeed launcher in its own session; stream its output (through `clean`, which masks secrets);
    always reap the ranks. SIGTERM (a Prefect cancel) stops the ranks first: they save and exit, within
    stop_grace_s."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=sigterm_on_parent_death, bufsize=1)
    try:
        on_term = lambda: stop_gracefully(proc, PROGRAM, stop_grace_s)  # noqa: E731
        with sigterm_kills(on_term), open(log_path, "a", encoding="utf-8") as log:
            for raw in proc.stdout:
                line = clean(raw.rstrip("\n"))
                log.write(line + "\n")
                log_line(line)
                if tail is not None:
                    tail.append(line)
        return proc.wait()
    finally:
        kill_group(proc)


def launch(train: TrainConfig, spec_path: Path, env: dict[str, str], out_dir: Path, log_line: Callable[[str], None],
           tail: deque) -> int:
    """One launcher (this node, or every node over ssh), or one per node (`train.cluster.launch: per_node`)."""
    port = None
    try:
        hostfile = hostfile_for(train, out_dir)
        hosts = read_hostfile(hostfile) if hostfile else []  # every name checked before any reaches ssh
        port = master_port(train, master_address(train, hosts) if hosts else "localhost", out_dir, env)
        remote = lambda host, cmd: on_node(train.cluster.node_command or ["ssh", "{host}"], host, cmd, {},  # noqa: E731
                                           train.cluster.node_command_shell)
        with secrets_for_ranks(env, train.checkpoint.mirror_url, out_dir) as (env, clean), \
                FrozenJobMonitor(out_dir, time.time(), remote):
            if hostfile is None or train.cluster.launch == "ssh":
                env = env_with_file(env, out_dir) if hostfile else env
                return run_launcher(launcher_command(train, spec_path, hostfile, port), env, log_line,
                                    out_dir / "launcher.log", tail, clean, train.checkpoint.stop_grace_s)
            program = ["--module", PROGRAM, "--spec", str(spec_path)]
            cmds = node_commands(deepspeed_binary(), hostfile, hosts, master_address(train, hosts), port, program,
                                 train.cluster.node_command, env, train.cluster.node_command_shell)
            return run_nodes(cmds, env, lambda line: (tail.append(line), log_line(line)), out_dir / "launcher.log",
                             kill_group, sigterm_on_parent_death, clean=clean,
                             remote=remote_ranks(train, hosts, spec_path))
    except LaunchFailed as err:
        raise TrainingFailed(f"training crashed: {err}. See {out_dir / 'launcher.log'}. Newest complete checkpoint: "
                             f"{latest_complete(out_dir / 'checkpoints') or 'none'}.", err.exit_code) from None
    except PortUnavailable as err:
        raise TrainingFailed(f"training could not start: {err}", 1) from None
    except ValueError as err:  # settings the launch cannot carry to the nodes
        raise TrainingFailed(f"training could not start: {err}", EXIT_CONFIG) from None
    finally:
        if port is not None and (removed := remove_shm_buffers(port)):
            log_line(f"removed {len(removed)} DeepSpeed buffer(s) from /dev/shm: {', '.join(sorted(removed))}")


def remote_ranks(train: TrainConfig, hosts: list, spec_path: Path) -> RemoteRanks | None:
    """The job's processes on hosts reached through train.cluster.node_command (not this machine's): what a cancel
    signals and the end of the launch kills there."""
    remote, cluster = [h.name for h in hosts if not is_local(h.name)], train.cluster
    if not cluster.node_command or not remote:
        return None
    return RemoteRanks(cluster.node_command, remote, spec_path, PROGRAM, cluster.node_command_shell,
                       train.checkpoint.stop_grace_s)


def remove_shm_buffers(port: int) -> list[str]:
    """DeepSpeed's CPU all-reduce buffers of this run (67 MB a rank in /dev/shm), which it never unlinks.

    Left behind they fill /dev/shm, which is memory: a few hundred CPU runs
    exhaust a 24 GB machine. This node's only; other nodes keep theirs.
    """
    removed = []
    for path in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_*"):
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def mapped_files(under: Path) -> set[str]:
    """The files under a folder that some live process of this node has memory-mapped (/proc/<pid>/maps)."""
    prefix, mapped = f"{under}/", set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:  # gone, or not ours to read
            continue
        mapped.update(fields[5] for fields in (line.split(None, 5) for line in text.splitlines())
                      if len(fields) == 6 and fields[5].startswith(prefix))
    return mapped


def remove_stale_shm_buffers(shm: Path = Path("/dev/shm"), min_age_s: float = 120.0) -> list[str]:
    """DeepSpeed buffers of runs that died without their train stage's cleanup (a SIGKILLed `pretrain train`):
    the ones no live process maps, older than min_age_s (a run starting on this node has just made its own and
    may not have mapped it yet)."""
    mapped, now = mapped_files(shm), time.time()
    removed = []
    for path in shm.glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*"):
        try:
            stale = str(path) not in mapped and now - path.stat().st_mtime > min_age_s
        except FileNotFoundError:
            continue
        if stale:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def run_train(model: ModelConfig, train: TrainConfig, tokenizer_dir: Path, tokens_dir: Path, out_dir: Path,
              mlflow_env: dict[str, str], log_line: Callable[[str], None] = print,
              overrides: Overrides = Overrides()) -> dict:
    """One launch of the training program on the configured ranks; its result, or TrainingFailed saying why.
    The `auto` settings are settled first by the communication plan, which is logged and kept in comm_plan.json."""
    try:
        train, plan = plan_launch(model, train, tokenizer_dir, out_dir)
    except ValueError as err:  # a batch that does not divide over these ranks: a retry will not help
        raise TrainingFailed(f"training not launched: {err}", EXIT_CONFIG) from None
    for line in render(plan).splitlines():
        log_line(line)
    spec_path = write_spec(model, train, tokenizer_dir, tokens_dir, out_dir, overrides, plan.chosen)
    if removed := remove_stale_shm_buffers():
        log_line(f"removed {len(removed)} DeepSpeed buffer(s) of dead runs from /dev/shm")
    tail: deque = deque(maxlen=200)
    since = time.time()
    try:
        code = launch(train, spec_path, launcher_env(train, mlflow_env), out_dir, log_line, tail)
    except TrainingFailed as err:  # the per-node launch reports a failed node by raising
        raise hang_failure(out_dir, since, log_line) or err from None
    if code != EXIT_DONE and (hung := hang_failure(out_dir, since, log_line)):
        raise hung
    ckpt_dir = out_dir / "checkpoints"
    tag = latest_complete(ckpt_dir)
    result = {"exit_code": code, "checkpoint_dir": str(ckpt_dir), "latest_checkpoint": tag,
              "latest_step": read_meta(ckpt_dir, tag)["step"] if tag else None}
    if code == EXIT_DONE:
        return result
    if code == EXIT_UNSAVED:
        raise TrainingFailed(unsaved_message(train, result), code)
    what = {EXIT_STOPPED: "stopped by SIGTERM after saving a checkpoint",
            EXIT_ANOMALY: "stopped on a loss anomaly (see the anomaly event in events.jsonl)",
            EXIT_CONFIG: "stopped on bad settings or data (a retry will not help)",
            EXIT_UNUSABLE: "stopped: the checkpoint to resume from did not load (marked UNUSABLE)"}.get(code, "crashed")
    raise TrainingFailed(f"training {what} (exit code {code}); see {out_dir / 'launcher.log'}. "
                         f"Newest complete checkpoint: {tag or 'none'}.{rank_errors(tail)}", code)


def hang_failure(out_dir: Path, since: float, log_line: Callable[[str], None]) -> TrainingFailed | None:
    """When the launch ended because its ranks hung: the failure naming the hung rank and where, its stacks
    archived under hangs/<time>/ and shown in the log."""
    report = hang_report(out_dir, since)
    if report is None:
        return None
    folder = archive_hang(out_dir, report)
    for rank, stack in report["stacks"].items():
        log_line(f"stack of hung rank {rank} (innermost first):\n{stack}")
    tag = latest_complete(out_dir / "checkpoints")
    return TrainingFailed(f"{describe(report, folder)}. Newest complete checkpoint: {tag or 'none'}.", EXIT_HUNG)


def unsaved_message(train: TrainConfig, result: dict) -> str:
    skipped = [e for e in read_jsonl(Path(result["checkpoint_dir"]).parent / EVENTS_FILE)
               if e.get("event") == "checkpoint_skipped"]
    need = f", a checkpoint needs about {skipped[-1]['needed_bytes'] / 1e9:.2f} GB with " \
           f"{skipped[-1]['free_bytes'] / 1e9:.2f} GB free" if skipped else ""
    durable = f"step {result['latest_step']} ({result['latest_checkpoint']})" if result["latest_checkpoint"] else \
        "none: no checkpoint was ever saved"
    return (f"training reached step {train.steps} but could not save it: no room under {result['checkpoint_dir']}"
            f"{need} (checkpoint_skipped events: {len(skipped)}). The last durable step is {durable}. Free disk "
            f"space or lower train.checkpoint.keep_last, then rerun: training resumes from there "
            f"(exit code {EXIT_UNSAVED})")


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")
_ERROR_LINE = re.compile(r"^(error: |[A-Za-z_][\w.]*(Error|Exception|Invalid|Mismatch)\w*: )")


def rank_errors(tail: deque) -> str:
    """The ranks' own error lines, deduplicated across ranks, so the failure says why without opening the log."""
    errors = [_RANK_PREFIX.sub("", line) for line in tail]
    unique = list(dict.fromkeys(line for line in errors if _ERROR_LINE.match(line)))[-3:]
    hiccup = transient_text("\n".join(errors))  # an NCCL timeout or lost node: worth a relaunch even before step 1
    if hiccup and hiccup not in unique:
        unique.append(hiccup)
    return ("\n" + "\n".join(unique)) if unique else ""
