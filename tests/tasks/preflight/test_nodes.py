"""Per-node preflight over two simulated nodes on this machine; one of them unreachable."""
from pretrain.config import parse_config
from tasks.common.hosts import read_hostfile
from tasks.preflight.checks import FAIL, PASS, WARN
from tasks.preflight.nodes import run_node_checks
from tests.conftest import set_train, tiny_dict

# a real shell stands in for ssh: it runs the probe for 127.0.0.1 and refuses for 'localhost'
FLAKY_SSH = ["sh", "-c", '[ "$0" != localhost ] && exec "$@"', "{host}"]


def config(tmp_path, node_command, drop: bool):
    data = tiny_dict(tmp_path / "run")
    set_train(data, hosts=[{"name": "127.0.0.1", "slots": 1}, {"name": "localhost", "slots": 1}],
                         launch="per_node", node_command=node_command)
    data["preflight"]["drop_failing_nodes"] = drop
    return parse_config(data)


def test_every_node_is_probed_for_clock_disk_and_shared_storage(tmp_path):
    cfg = config(tmp_path, [], drop=False)
    (tmp_path / "run").mkdir()
    checks, nodes = run_node_checks(cfg, tmp_path / "run", tmp_path / "run" / "preflight")
    by_name = {c.name: c for c in checks}
    for host in ("127.0.0.1", "localhost"):
        assert by_name[f"node_reachable[{host}]"].status == PASS
        assert by_name[f"clock_skew[{host}]"].status == PASS  # the same clock
        assert by_name[f"shared_storage[{host}]"].status == PASS and by_name[f"free_disk[{host}]"].status == PASS
        assert by_name[f"dev_shm[{host}]"].status == PASS
    assert nodes["dropped"] == [] and not list((tmp_path / "run").glob(".preflight-shared-*"))


def test_an_unreachable_node_fails_or_is_dropped_by_policy(tmp_path):
    (tmp_path / "run").mkdir()
    strict = config(tmp_path, FLAKY_SSH, drop=False)
    checks, nodes = run_node_checks(strict, tmp_path / "run", tmp_path / "run" / "preflight")
    assert {c.name: c.status for c in checks}["node_reachable[localhost]"] == FAIL and nodes["dropped"] == []

    lenient = config(tmp_path, FLAKY_SSH, drop=True)
    checks, nodes = run_node_checks(lenient, tmp_path / "run", tmp_path / "run" / "preflight")
    unreachable = {c.name: c for c in checks}["node_reachable[localhost]"]
    assert unreachable.status == WARN and "dropped" in unreachable.detail
    assert nodes["dropped"] == ["localhost"] and nodes["hosts"] == ["127.0.0.1"]
    assert [h.name for h in read_hostfile(tmp_path / "run" / "preflight" / "hostfile")] == ["127.0.0.1"]
