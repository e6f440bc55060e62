"""The mean of model states: exact against float64, in any order, and refused across architectures."""
import pytest
import torch

from model.average import mean_state


def test_the_mean_is_taken_in_float64_and_any_order_gives_it():
    torch.manual_seed(0)
    states = [{"w": torch.randn(3, 4), "b": torch.randn(4)} for _ in range(3)]
    got = mean_state(iter(states))  # streamed: a generator, as checkpoints are loaded one at a time
    for name in ("w", "b"):
        expected = (states[0][name].double() + states[1][name].double() + states[2][name].double()) / 3
        assert got[name].dtype == torch.float32 and torch.equal(got[name], expected.float())
    assert all(torch.equal(got[k], v) for k, v in mean_state(reversed(states)).items())


def test_other_names_or_shapes_are_refused_naming_the_input():
    a = {"w": torch.zeros(2, 2)}
    with pytest.raises(ValueError, match=r"input 1 has other weights than input 0 \(missing \['w'\], extra \['v'\]\)"):
        mean_state([a, {"v": torch.zeros(2, 2)}])
    with pytest.raises(ValueError, match=r"input 2's w is \(3, 2\), input 0's \(2, 2\)"):
        mean_state([a, a, {"w": torch.zeros(3, 2)}])
    with pytest.raises(ValueError, match="nothing to average"):
        mean_state([])
