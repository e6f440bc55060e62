"""How a checkpoint resumes in another layout: read from its metadata or, for older ones, its files."""
import pytest

from model.reshape import Layout, ReshapeUnsupported, resume_point, saved_layout


def tag_with(tmp_path, *files):
    (tmp_path / "t").mkdir(parents=True)
    for name in files:
        (tmp_path / "t" / name).write_text("")
    return tmp_path


def test_the_saved_layout_comes_from_the_metadata_or_the_files(tmp_path):
    assert saved_layout(tmp_path, "t", {"world_size": 4, "zero_stage": 2}) == Layout(4, 2)
    stage3 = tag_with(tmp_path / "a", "zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert saved_layout(stage3, "t", {"world_size": 2}) == Layout(2, 3)
    stage1 = tag_with(tmp_path / "b", "mp_rank_00_model_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt")
    assert saved_layout(stage1, "t", {"world_size": 2}) == Layout(2, 1)
    assert saved_layout(tag_with(tmp_path / "c", "mp_rank_00_model_states.pt"), "t", {"world_size": 2}) == Layout(2, 0)


@pytest.mark.parametrize("saved,now,reshaped", [((4, 1), (4, 1), False), ((4, 1), (2, 1), True),
                                                ((2, 2), (2, 3), True), ((2, 0), (3, 0), False)])
def test_a_changed_layout_loads_the_universal_form(tmp_path, saved, now, reshaped):
    point = resume_point(tmp_path, "step_00000010", {"world_size": saved[0], "zero_stage": saved[1]}, Layout(*now))
    assert point.reshaped is reshaped
    assert point.load_tag == ("step_00000010/universal" if reshaped else "step_00000010")


@pytest.mark.parametrize("saved,now", [((2, 0), (2, 1)), ((2, 3), (3, 0))])
def test_zero_0_converts_to_no_other_stage_and_says_what_to_set(tmp_path, saved, now):
    with pytest.raises(ReshapeUnsupported, match=f"Set train.cluster.zero_stage: {saved[1]} for this run"):
        resume_point(tmp_path, "t", {"world_size": saved[0], "zero_stage": saved[1]}, Layout(*now))
