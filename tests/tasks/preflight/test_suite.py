"""The train stage trains on the nodes the preflight kept."""
import json

from tasks.preflight.suite import without_dropped_nodes
from pretrain.config import parse_config
from tests.conftest import set_train, tiny_dict


def test_train_config_leaves_out_dropped_nodes(tmp_path):
    data = tiny_dict(tmp_path / "run")
    set_train(data, hosts=[{"name": "node-a", "slots": 2}, {"name": "node-b", "slots": 2}], launch="per_node")
    cfg = parse_config(data)
    assert without_dropped_nodes(cfg) is cfg  # no preflight report yet
    (tmp_path / "run" / "preflight").mkdir(parents=True)
    (tmp_path / "run" / "preflight" / "report.json").write_text(json.dumps({"nodes": {"dropped": ["node-b"]}}))
    kept = without_dropped_nodes(cfg)
    assert [(h.name, h.slots) for h in kept.train.cluster.hosts] == [("node-a", 2)] and kept.train.cluster.launch == "per_node"
