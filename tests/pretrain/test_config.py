import re
import subprocess
import sys

import pytest
import yaml

from pretrain.config import (SECTION_OF, ConfigError, HostConfig, TrainConfig, UniqueKeyLoader, load_config, merged_train,
                             parse_config)
from tests.conftest import ROOT, set_train, tiny_dict


@pytest.mark.parametrize("name", ["tiny", "tiny-rollback", "tiny-decay", "125m", "500m", "1.5b"])
def test_shipped_presets_validate(name):
    cfg = load_config(ROOT / "configs" / f"{name}.yaml")
    assert cfg.train.batch.seq_len <= cfg.model.max_seq_len


def test_unknown_key_is_named(tmp_path):
    data = tiny_dict(tmp_path)
    data["train"]["learning_rate"] = 1e-3
    with pytest.raises(ConfigError, match=r"train\.learning_rate: unknown key"):
        parse_config(data)


def test_all_problems_reported_at_once(tmp_path):
    data = tiny_dict(tmp_path)
    data["train"]["batch"]["micro_batch_sise"] = 2
    data["clean"]["rules"]["length"] = {"min_chars": -1}
    from pretrain.presets import PRESETS

    data["model"] = {k: v for k, v in PRESETS["debug"].items() if k != "dim"}  # no preset to fill it
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    msg = str(err.value)
    assert "3 problem(s)" in msg
    assert "train.batch.micro_batch_sise" in msg and "clean.rules.length.min_chars" in msg and "model.dim: required" in msg


def test_invalid_yaml_names_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrun_root: r\nclean: [unclosed\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+"):
        load_config(bad)


def test_missing_file_names_fix(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; pass --config"):
        load_config(tmp_path / "nope.yaml")


def test_cross_field_checks(tmp_path):
    data = tiny_dict(tmp_path)
    data["model"]["n_kv_heads"] = 3
    with pytest.raises(ConfigError, match="divisible by model.n_kv_heads"):
        parse_config(data)
    data = tiny_dict(tmp_path)
    set_train(data, seq_len=4096)
    with pytest.raises(ConfigError, match="exceeds model.max_seq_len"):
        parse_config(data)


def test_config_is_frozen(tiny_cfg):
    with pytest.raises(Exception):
        tiny_cfg.train.steps = 5


@pytest.mark.parametrize("content,expected", [
    ("name: x\nrun_root: r\nbogus: 1\n", "bogus: unknown key"),
    ("name: [\n", "invalid YAML"),
])
def test_cli_reports_one_clear_error(tmp_path, content, expected):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "cli", "clean", "--config", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def load_text(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path)


@pytest.mark.parametrize("section, key, value, message", [
    ("train.optimizer", "lr", float("inf"), "train.optimizer.lr: Input should be a finite number"),
    ("train.optimizer", "min_lr", float("nan"), "train.optimizer.min_lr: Input should be a finite number"),
    ("train", "steps", True, "steps: a number is required, got true/false"),
    ("tokenizer", "vocab_size", 100_000_000_000, "tokenizer.vocab_size: Input should be less than or equal to 1000000"),
    ("train.optimizer", "warmup_steps", 6, "train.optimizer.warmup_steps=6 is not below train.steps=6"),
    ("scaling", "budgets", [1e17, -3e17], "scaling.budgets.1: Input should be greater than 0"),
    ("scaling", "dims", [0], "scaling.dims.0: Input should be greater than 0"),
    ("train.data", "mixture", {"weights": {"en": 1}, "decay_weights": {"code": 1}},
     "decay_weights starts at the schedule's decay, which only schedule: wsd has"),
    ("train.data", "mixture", {"weights": {"en": 1}, "decay_weights": {"code": -1, "en": 1}},
     "train.data.mixture.decay_weights {'code': -1.0, 'en': 1.0} must be non-negative"),
])
def test_values_that_used_to_pass_are_refused_at_validation(tmp_path, section, key, value, message):
    data = tiny_dict(tmp_path)
    where = data
    for part in section.split("."):
        where = where.setdefault(part, {})
    where[key] = value
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert message in str(err.value)


def test_a_config_of_the_flat_train_section_is_told_where_each_key_moved(tmp_path):
    data = tiny_dict(tmp_path)
    data["train"] = {"steps": 10, "seq_len": 128, "micro_batch_size": 4, "lr": 1e-3, "optimizer": "torch_fused",
                     "data_order": "feistel", "hosts": [], "batch": {"seq_len": 128, "micro_batch_size": 4}}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    message = str(err.value)
    assert "train.lr: moved to train.optimizer.lr" in message and "train.hosts: moved to train.cluster.hosts" in message
    assert "train.optimizer: moved to train.optimizer.implementation" in message
    assert "train.data_order: moved to train.data.order" in message and "train.steps" not in message


@pytest.mark.parametrize("name", ['tiny"; DROP', "a b", "-leading-dash", "x" * 101, "../escape"])
def test_run_names_are_safe_for_queries_keys_and_paths(tmp_path, name):
    data = tiny_dict(tmp_path)
    data["name"] = name
    with pytest.raises(ConfigError, match="is not a safe run name"):
        parse_config(data)


def test_a_key_given_twice_is_an_error_not_the_last_one_silently(tmp_path):
    with pytest.raises(ConfigError, match=r"line 3.*key 'lr' appears twice in one mapping \(first on line 2\)"):
        load_text(tmp_path, "train:\n  lr: 1.0e-3\n  lr: 1.0\n")
    # YAML merge keys still override what they merge in
    merged = yaml.safe_load("a: &base {x: 1}\nb:\n  <<: *base\n  x: 2\n")
    assert merged["b"] == {"x": 2}
    assert yaml.load("a: &base {x: 1}\nb:\n  <<: *base\n  x: 2\n", Loader=UniqueKeyLoader)["b"] == {"x": 2}


def merged(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def doc_yaml_examples() -> list[str]:
    """The YAML blocks of the README and of every page under docs/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [block for page in pages
            for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)]


def test_every_yaml_example_in_the_docs_loads_as_written(tmp_path):
    examples = doc_yaml_examples()
    assert len(examples) >= 3  # the README's rules, the clean page's rules, the training mixture
    for example in examples:  # each read by the config loader as the user would write it, into the tiny config
        data = merged(tiny_dict(tmp_path / "run"), yaml.load(example, Loader=UniqueKeyLoader))
        parse_config(data, "README example")


def test_off_is_a_word_not_a_boolean(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump(tiny_dict(tmp_path / "run")) + "# fineweb below\n")
    data = yaml.safe_load(cfg_file.read_text())
    data["clean"]["rules"]["fineweb"] = {"mode": "MODE"}
    cfg_file.write_text(yaml.safe_dump(data).replace("mode: MODE", "mode: off"))
    assert load_config(cfg_file).clean.rules.fineweb.mode == "off"
    assert yaml.load("flag: on\nyes_no: no\nreal: true", Loader=UniqueKeyLoader) == {
        "flag": "on", "yes_no": "no", "real": True}


def test_every_train_setting_has_one_name_across_the_sections(tiny_cfg):
    from pretrain.config.train import SECTION_CLASSES

    names = [n for cls in SECTION_CLASSES.values() for n in cls.model_fields]
    assert len(names) == len(set(names)) == len(SECTION_OF)  # changed() and flat() find each by its name alone
    assert not set(names) & set(TrainConfig.model_fields)
    flat = tiny_cfg.train.flat()
    assert flat["lr"] == tiny_cfg.train.optimizer.lr and flat["num_gpus"] == 2 and "batch" not in flat


def test_changed_writes_each_setting_into_its_section_and_leaves_the_rest(tiny_cfg):
    before = tiny_cfg.train
    after = before.changed(lr=5e-4, hosts=[HostConfig(name="node-a", slots=2)], steps=9)
    assert (after.optimizer.lr, after.cluster.hosts[0].name, after.steps) == (5e-4, "node-a", 9)
    assert after.optimizer.min_lr == before.optimizer.min_lr and after.batch == before.batch
    assert before.optimizer.lr == 1e-3  # a copy: the config itself is frozen
    with pytest.raises(KeyError, match="train has no field 'learning_rate'"):
        before.changed(learning_rate=1.0)
    assert merged_train({"steps": 3, "batch": {"seq_len": 8}}, {"micro_batch_size": 2, "seed": 7}) == {
        "steps": 3, "seed": 7, "batch": {"seq_len": 8, "micro_batch_size": 2}}


def test_a_sources_own_rule_settings_are_checked_as_clean_rules_and_never_reach_corpus_wide_rules(tmp_path):
    data = tiny_dict(tmp_path)
    source = data["clean"]["sources"][0]
    source["rules"] = {"c4": {"mode": "tag"}, "gopher_quality": {"min_doc_words": 20}}
    cfg = parse_config(data).clean
    own = cfg.for_source(0).rules
    assert (own.c4.mode, own.gopher_quality.min_doc_words, own.gopher_quality.max_doc_words) == ("tag", 20, 100_000)
    assert cfg.rules.c4.mode == "drop" and cfg.for_source(1) is cfg  # the other source: clean.rules as they are
    source["rules"] = {"c4": {"mod": "tag"}}
    with pytest.raises(ConfigError, match=re.escape(f"clean.sources[0] ({source['name']}).rules.c4.mod: unknown key")):
        parse_config(data)
    source["rules"] = {"dirty": {"mode": "off"}}
    with pytest.raises(ConfigError, match=r"rules\.dirty: a source may set length, .*dirty holds for the whole "
                                          r"corpus: set it in clean\.rules"):
        parse_config(data)
