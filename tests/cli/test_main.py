"""The `pretrain` CLI: real stage flows (slow: Prefect starts a temporary server), check-config and plan."""
import os
from pathlib import Path
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, prefect_home, tiny_dict


def run_cli(*args, cwd=ROOT, server: str | None = None):
    """server: a Prefect API to run on (PREFECT_API_URL); None: the CLI starts its own temporary one."""
    env = {**os.environ, "PREFECT_API_URL": server} if server else None
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env=env)


@pytest.mark.slow
def test_missing_source_fails_clearly_and_writes_nothing(tmp_path, shared_prefect):
    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(tmp_path / "absent" / "*.jsonl")}]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(data))
    proc = run_cli("clean", "--config", str(cfg), server=shared_prefect)
    assert proc.returncode == 1
    assert f"nothing found at {tmp_path}/absent/*.jsonl" in proc.stderr
    assert "fix clean.sources[].path" in proc.stderr
    assert not (tmp_path / "run" / "clean").exists()


@pytest.mark.slow
def test_stage_needs_previous_stage(tmp_path, shared_prefect):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_dict(tmp_path / "run")))
    proc = run_cli("tokenize", "--config", str(cfg), server=shared_prefect)
    assert proc.returncode == 1
    assert "no complete 'clean' output" in proc.stderr and "run `pretrain clean" in proc.stderr
    assert not (tmp_path / "run" / "tokens").exists()


def test_a_stage_is_refused_only_for_sections_it_reads(tmp_path, capsys):
    from cli.main import main

    full = tiny_dict(tmp_path / "run")
    cfg = write(tmp_path, {key: full[key] for key in ("name", "run_root", "clean")})
    assert main(["train", "--config", cfg]) == 2
    assert "`train` needs the config section(s) model, train" in capsys.readouterr().err
    assert main(["check-config", "--config", cfg]) == 0
    no_clean = write(tmp_path, {key: full[key] for key in ("name", "run_root", "model", "train")})
    assert main(["run", "--config", no_clean]) == 2
    assert "`run` needs the config section(s) clean," in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_plan_prints_the_chinchilla_allocation_and_names_missing_inputs(capsys):
    import json as _json

    from cli.main import main

    assert main(["plan", "--flops", "1.21e20", "--gpus", "8", "--gpu", "A100", "--mfu", "0.5", "--json"]) == 0
    planned = _json.loads(capsys.readouterr().out)
    assert planned["law"] == "chinchilla-refit" and 0.85e9 < planned["params"] < 1.15e9  # Chinchilla: 1B, 20.2B tokens
    assert planned["wall_days"] == pytest.approx(1.21e20 / (8 * 312e12 * 0.5) / 86400)
    assert planned["mfu_source"] == "--mfu"
    assert main(["plan", "--days", "14"]) == 2
    assert "--days needs --gpus" in capsys.readouterr().out


def write(tmp_path, data) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_check_config_checks_the_sources_and_the_run_root(tmp_path, capsys):
    from cli.main import main

    data = tiny_dict(tmp_path / "run")
    assert main(["check-config", "--config", write(tmp_path, data)]) == 0
    out = capsys.readouterr().out
    assert "checked: source 'demo-paragraphs': 1 file(s)" in out and f"run_root {tmp_path / 'run'} will be created" in out
    data["clean"]["sources"].append({"path": str(tmp_path / "absent" / "*.jsonl"), "name": "gone"})
    data["clean"]["sources"].append({"path": "s3://bucket/corpus/*.jsonl", "name": "remote"})
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    data["run_root"] = str(locked / "run")
    assert main(["check-config", "--config", write(tmp_path, data)]) == 2
    captured = capsys.readouterr()
    assert "source 'gone': nothing found at" in captured.err
    assert "not checked: source 'remote' is remote (s3://)" in captured.out
    if os.geteuid() != 0:  # root writes anywhere
        assert f"{locked} is not writable" in captured.err


def test_check_config_tries_the_tracking_server_and_a_stage_fails_fast_without_it(tmp_path, capsys):
    import time

    from flows.common import tracking_target
    from cli.main import main
    from pretrain.config import parse_config
    from tasks.common.ports import free_port

    data = tiny_dict(tmp_path / "run")
    assert main(["check-config", "--config", write(tmp_path, data)]) == 0
    assert "checked: MLflow sqlite:///" in capsys.readouterr().out  # the default: a local store
    data["tracking"] = {"mlflow_uri": f"http://user:pw-planted@127.0.0.1:{free_port()}"}  # nothing listens there
    assert main(["check-config", "--config", write(tmp_path, data)]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "infra/local.sh up" in err and "pw-planted" not in err
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="does not answer"):
        tracking_target(parse_config(data))  # what every stage does first: seconds, not MLflow's minutes
    assert time.monotonic() - started < 30


def descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def is_prefect_server(p) -> bool:
    try:
        line = " ".join(p.cmdline())
    except Exception:  # noqa: BLE001 - gone meanwhile
        return False
    return ("prefect" in line and " server start" in line) or "prefect.server.api.server" in line


PROCESS_LOG_HOOK = """import os, sys
with open(os.environ["PRETRAIN_TEST_PROCESS_LOG"], "a") as log:
    log.write(f"{os.getpid()}\\t{' '.join(sys.argv)}\\n")
"""


def logged_processes(log: Path) -> dict[int, str]:
    """Every Python process the run started, from its first line of Python (pid -> command line)."""
    rows = [line.split("\t", 1) for line in log.read_text().splitlines() if "\t" in line]
    return {int(pid): argv for pid, argv in rows}


@pytest.mark.slow
def test_clean_stage_alone_with_one_server_and_nothing_left_running(tmp_path, migrated_prefect_db):
    """Every Python process of the run records itself as it starts (a sitecustomize on PYTHONPATH), so a second
    server is counted however short it lived, and each of them is waited on, not slept past."""
    import psutil

    full = tiny_dict(tmp_path / "run")
    data = {key: full[key] for key in ("name", "run_root", "clean")}  # what the clean stage reads, nothing else
    data["clean"]["executor"] = {"kind": "process", "workers": 2}
    home = prefect_home(tmp_path / "prefect-home", migrated_prefect_db)
    hook, log = tmp_path / "hook", tmp_path / "processes.log"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(PROCESS_LOG_HOOK)
    env = {**os.environ, "PREFECT_HOME": str(home), "PRETRAIN_TEST_PROCESS_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "cli", "clean", "--config", write(tmp_path, data)],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "clean" / "_SUCCESS").is_file() and '"docs_in"' in proc.stdout
    started = logged_processes(log)
    servers = [argv for argv in started.values() if "server start" in argv or "prefect.server.api.server" in argv]
    workers = [argv for argv in started.values() if "multiprocessing" in argv or "concurrent" in argv]
    assert len(servers) == 1, servers  # one for the run and its pool workers, not one per process
    assert len(started) >= 3 and workers, started  # the CLI, the server and the pool's workers all recorded
    live = [psutil.Process(pid) for pid in started if psutil.pid_exists(pid)]
    _, alive = psutil.wait_procs(live, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], [p.cmdline() for p in alive]


@pytest.mark.slow
def test_a_killed_cli_leaves_no_pool_worker_or_server_behind(tmp_path, migrated_prefect_db):
    import signal
    import time

    import psutil

    from tests.conftest import CORPORA, need_shared

    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(need_shared(CORPORA / "en" / "ag_news_test.csv")),
                                 "columns": ["label", "title", "text"], "name": "ag"},
                                {"path": str(CORPORA / "zh" / "cnews.val.txt"), "format": "tsv",
                                 "columns": ["label", "text"], "name": "zh"}]
    data["clean"]["shard_max_mb"] = 0.5  # many shards: the workers are busy when the CLI dies
    data["clean"]["executor"] = {"kind": "process", "workers": 2}
    home = prefect_home(tmp_path / "prefect-home", migrated_prefect_db)
    proc = subprocess.Popen([sys.executable, "-m", "cli", "clean", "--config", write(tmp_path, data)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PREFECT_HOME": str(home)})
    deadline = time.time() + 300
    while len([p for p in descendants(proc.pid) if not is_prefect_server(p)]) < 2:  # the pool's workers are up
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    time.sleep(2)
    family = descendants(proc.pid)
    assert any(is_prefect_server(p) for p in family)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(family, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], [p.cmdline() for p in alive]


@pytest.mark.slow
def test_a_run_root_with_quotes_and_corpus_links_out_or_to_nothing_clean_safely(tmp_path, shared_prefect):
    """And a corpus folder holding a link to a file outside it (a secret) and a link to nothing."""
    from tasks.tokenize.rejects import rule_table

    root = tmp_path / "it's [a] *run"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "real.txt").write_text("A plain paragraph about rivers, their floods and the towns along them. " * 3)
    (tmp_path / "shadow").write_text("root:TopSecretHash123:19000:0:99999:7:::\n" * 5)
    (corpus / "shadow.txt").symlink_to(tmp_path / "shadow")
    (corpus / "gone.txt").symlink_to(tmp_path / "nothing-here")
    data = tiny_dict(root)
    data = {key: data[key] for key in ("name", "run_root", "clean")}
    data["clean"]["sources"].append({"path": str(corpus), "name": "linked"})
    proc = run_cli("clean", "--config", write(tmp_path, data), server=shared_prefect)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = yaml.safe_load((root / "clean" / "manifest.json").read_text())  # JSON is YAML
    assert manifest["docs_in"] == manifest["kept"] + manifest["rejected"]
    assert manifest["rejected_by_rule"]["dedup"] > 0  # DuckDB read the shards under that root
    unreadable = {Path(u["path"]).name: u["error"] for u in manifest["unreadable_files"]}
    assert "outside the source's folder" in unreadable["shadow.txt"] and "does not exist" in unreadable["gone.txt"]
    assert manifest["docs_by_source"]["linked"] == 1  # the real file, read
    import pyarrow.parquet as pq

    def text_of(path: Path) -> str:  # Parquet is compressed: its rows, not its bytes
        return str(pq.read_table(path).to_pylist()) if path.suffix == ".parquet" else path.read_text("utf-8", "replace")

    assert not any("TopSecretHash123" in text_of(p) for p in root.rglob("*") if p.is_file())
    # the per-rule table with tokens reads the same run root
    (root / "tokens").mkdir()
    import pyarrow as pa
    row = next(r for r in pq.read_table(root / "clean" / "stats.parquet").to_pylist() if r["outcome"] == "rejected")
    pq.write_table(pa.table({k: [row[k]] for k in ("outcome", "rule", "reason")} | {"tokens": [7]}),
                   root / "tokens" / "rule_tokens.parquet")
    table = rule_table(root / "clean", root / "tokens")
    assert [r["tokens"] for r in table if (r["rule"], r["reason"]) == (row["rule"], row["reason"])] == [7]


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["clean", "tokenize"])
def test_ctrl_c_during_a_pool_stage_ends_the_run_and_its_workers(tmp_path, migrated_prefect_db, stage):
    """Ctrl-C at a terminal sends SIGINT to the whole foreground process group: the CLI, its server and the pool's
    workers. The run must end within a minute, leaving nothing running, instead of waiting on workers."""
    import signal
    import time

    import psutil

    from tests.conftest import CORPORA, need_shared

    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(need_shared(CORPORA / "en" / "ag_news_test.csv")),
                                 "columns": ["label", "title", "text"], "name": "ag"},
                                {"path": str(CORPORA / "zh" / "cnews.val.txt"), "format": "tsv",
                                 "columns": ["label", "text"], "name": "zh"}]
    data["clean"]["shard_max_mb"] = 0.5  # many shards: the workers are busy when Ctrl-C comes
    data["clean"]["executor"] = {"kind": "process", "workers": 2}
    home = prefect_home(tmp_path / "prefect-home", migrated_prefect_db)
    proc = subprocess.Popen([sys.executable, "-m", "cli", "run", "--config", write(tmp_path, data)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PREFECT_HOME": str(home)}, start_new_session=True)
    deadline = time.time() + 300
    while stage == "tokenize" and not (tmp_path / "run" / "tokenizer" / "_SUCCESS").is_file():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    while len([p for p in descendants(proc.pid) if not is_prefect_server(p)]) < 2:  # the pool's workers are up
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    family = [psutil.Process(proc.pid), *descendants(proc.pid)]
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run did not end within 60 s of Ctrl-C")
    assert proc.returncode != 0 and "Traceback" not in err.splitlines()[-1:]
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], [p.cmdline() for p in alive]
