from model.data import training_dataset, training_sampler
from tasks.train.skipped import skipped_data_report, skipped_documents
from tasks.train.spec import data_spec


def test_skipped_ranges_name_their_documents_sources_and_channels(prepared_run):
    cfg, root = prepared_run
    data = data_spec(cfg.train, root / "tokens")
    rows = skipped_documents(data, [(8, 16)])
    dataset = training_dataset(root / "tokens", data)
    sampler = training_sampler(dataset, data)
    assert {r["sample"] for r in rows} == {sampler.sample_at(p) for p in range(8, 16)}
    assert {r["source"] for r in rows} <= set(dataset.manifest["sources"])
    report = skipped_data_report(data, [(8, 16)])
    assert sum(r["samples"] for r in report["rows"]) >= 8 and "| 8..16 |" in report["markdown"]
