from model.data import training_dataset, training_sampler
from tasks.train.skipped import skipped_data_report, skipped_documents


def test_skipped_ranges_name_their_documents_sources_and_channels(prepared_run):
    cfg, root = prepared_run
    train = cfg.train.model_dump()
    rows = skipped_documents(root / "tokens", train, [(8, 16)])
    dataset = training_dataset(root / "tokens", train)
    sampler = training_sampler(dataset, train)
    assert {r["sample"] for r in rows} == {sampler.sample_at(p) for p in range(8, 16)}
    assert {r["source"] for r in rows} <= set(dataset.manifest["sources"])
    report = skipped_data_report(root / "tokens", train, [(8, 16)])
    assert sum(r["samples"] for r in report["rows"]) >= 8 and "| 8..16 |" in report["markdown"]
