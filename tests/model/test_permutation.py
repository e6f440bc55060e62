import random
import tracemalloc

import numpy as np
import pytest

from model.data import GlobalSampler, SamplerState
from model.permutation import FeistelPermutation


def test_a_bijection_for_every_small_n():
    for n in [*range(1, 70), 127, 128, 129, 1000, 4095, 4096, 4097, 65537]:
        perm = FeistelPermutation(n, 1, 0, 0)
        assert sorted(perm(i) for i in range(n)) == list(range(n)), n


def test_a_bijection_on_a_sample_of_a_large_domain():
    n = 500_000_000
    perm = FeistelPermutation(n, 7, 0, 0)
    rng = random.Random(0)
    inputs = rng.sample(range(n), 20_000)
    outputs = [perm(i) for i in inputs]
    assert all(0 <= y < n for y in outputs)
    assert len(set(outputs)) == len(outputs)  # 20,000 distinct inputs, no collision
    with pytest.raises(IndexError):
        perm(n)


def test_keys_change_the_order():
    n = 10_000
    orders = [[FeistelPermutation(n, *key)(i) for i in range(50)] for key in ((1, 0, 0), (2, 0, 0), (1, 1, 0), (1, 0, 1))]
    assert len({tuple(o) for o in orders}) == 4
    assert [FeistelPermutation(n, 1, 0, 0)(i) for i in range(50)] == orders[0]  # and only the keys


def test_no_visible_structure():
    """What a linear-congruential shuffle fails: its outputs step by a constant, so position and source
    order stay correlated in windows and consecutive differences take one value."""
    n = 1_000_003
    perm = FeistelPermutation(n, 3, 0, 0)
    positions = np.arange(200_000)
    out = np.array([perm(int(p)) for p in positions], dtype=np.float64)
    assert abs(np.corrcoef(positions, out)[0, 1]) < 0.01
    assert abs(np.corrcoef(out[:-1], out[1:])[0, 1]) < 0.01
    steps = np.mod(np.diff(out), n)
    assert len(np.unique(steps[:5000])) > 4950  # random steps: ~12 repeats by the birthday bound
    # every window of 1,000 consecutive positions draws evenly from the source order (deciles)
    windows = out.reshape(-1, 1000) // (n / 10)
    counts = np.stack([np.bincount(w.astype(int), minlength=10) for w in windows])
    assert counts.mean(axis=0) == pytest.approx(100, abs=3)
    assert counts.std() < 15  # binomial(1000, 0.1): 9.5
    lcg = (np.arange(200_000) * 48271 + 11) % n  # the failure the test exists for
    assert len(np.unique(np.mod(np.diff(lcg), n)[:5000])) == 1


def test_first_batch_at_pretraining_scale_in_constant_memory():
    tracemalloc.start()
    try:
        sampler = GlobalSampler([400_000_000, 100_000_000], seed=1, weights=[0.7, 0.3],
                                state=SamplerState(consumed_samples=3_000_000_000))
        batch = sampler.next_global_batch(512)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(set(batch)) == 512
    assert peak < 5_000_000  # the materialised shuffle held 400M int32s: 1.6 GB


def test_the_old_order_is_kept_for_runs_that_started_with_it():
    old = SamplerState.from_dict({"consumed_samples": 40, "skipped": []})  # a checkpoint of an earlier version
    assert old.order == "numpy_shuffle"
    legacy = GlobalSampler(1000, 5, old).next_global_batch(8)
    order = np.arange(1000, dtype=np.int32)
    np.random.default_rng([5, 0, 0]).shuffle(order)
    assert legacy == order[40:48].tolist()
    assert SamplerState.from_dict(SamplerState(40).to_dict()).order == "feistel"
