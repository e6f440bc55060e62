"""The stage record: every stage declared once, consistent with the config and the flows that read it."""
import inspect

from pretrain.config import PipelineConfig, SECTIONS_NEEDED
from pretrain.stages import PIPELINE, STAGE_NAMES, STAGES, VERSIONED
from tasks.versions import section_fields


def test_stages_read_only_stages_before_them_and_config_that_exists(tiny_cfg):
    for k, stage in enumerate(PIPELINE):
        assert set(stage.inputs) <= set(STAGE_NAMES[:k]), stage.name
        assert set(stage.needs) <= set(PipelineConfig.model_fields), stage.name
        for path in stage.version_fields:
            assert section_fields(tiny_cfg, path), f"{stage.name}: {path} names no config field"
    assert VERSIONED == ("clean", "tokenizer", "tokenize", "train")


def test_the_config_requires_the_sections_each_stage_needs():
    assert {name: SECTIONS_NEEDED.get(name, ()) for name in STAGE_NAMES} == {s.name: s.needs for s in PIPELINE}


def test_every_versioned_stage_flow_takes_the_versions_a_pipeline_run_planned():
    from cli.main import _flow_for

    for name in VERSIONED:
        assert "planned" in inspect.signature(_flow_for(name).fn).parameters, name
    assert STAGES["train"].result == "result.json"  # the file `pretrain status` reads as training's completion
