"""Retry conditions on real failures: a gloo peer that dies or stalls, against config and data errors."""
import datetime
import multiprocessing as mp
import os
import time

import pytest
from pydantic import ValidationError
from prefect.states import Failed

from pretrain.config import TrainConfig
from tasks.common.failures import is_transient, retry_if_transient, transient_text
from tasks.common.ports import free_port


def _rank(rank: int, mode: str, port: int, errors) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=2))
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        if mode == "dead":
            os._exit(1)  # a lost node: no goodbye
        time.sleep(4)  # a stalled peer: the collective times out
        os._exit(0)
    try:
        dist.all_reduce(t)
    except Exception as err:  # noqa: BLE001 - the real error is the fixture
        errors.put((type(err).__name__, str(err)))
    errors.close()
    errors.join_thread()  # flush the queue before the hard exit below
    os._exit(0)  # no process-group teardown: the peer is gone


def gloo_failure(mode: str) -> RuntimeError:
    ctx = mp.get_context("spawn")
    errors, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_rank, args=(r, mode, port, errors)) for r in range(2)]
    for p in procs:
        p.start()
    name, message = errors.get(timeout=60)
    for p in procs:
        p.join(timeout=30)
    assert name in ("RuntimeError", "DistBackendError", "DistNetworkError"), name
    return RuntimeError(message)


@pytest.mark.parametrize("mode", ["dead", "stalled"])
def test_a_dead_or_stalled_peer_is_transient(mode):
    err = gloo_failure(mode)
    assert is_transient(err), str(err)
    assert retry_if_transient(None, None, Failed(data=err))


def test_config_and_data_errors_are_not_retried():
    try:
        TrainConfig(steps=1, batch={"seq_len": 0, "micro_batch_size": 1})
    except ValidationError as err:
        config_error = err
    for err in (config_error, FileNotFoundError("runs/x/tokens/manifest.json"), ValueError("vocab mismatch"),
                KeyError("text")):
        assert not is_transient(err), err
        assert not retry_if_transient(None, None, Failed(data=err))


def test_nccl_timeout_and_lost_node_lines_in_a_launcher_log():
    # the formats torch's NCCL watchdog and pdsh print
    log = ("step 120/1000 loss=3.1\n"
           "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=9051, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600046 "
           "milliseconds before timing out.\n")
    assert transient_text(log).startswith("[rank3]")
    assert transient_text("pdsh@node0: node3: ssh exited with exit code 255")
    assert transient_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") is None
    assert is_transient(ConnectionResetError("peer"))
