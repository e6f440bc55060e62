import pytest

from model.schedule import cosine_lr, wsd_lr


@pytest.mark.parametrize("fn", [cosine_lr, wsd_lr])
def test_warmup_peak_and_floor(fn):
    kw = dict(lr=1e-3, min_lr=1e-4, warmup=10, total=100)
    assert fn(0, **kw) == pytest.approx(1e-4)
    assert fn(9, **kw) == pytest.approx(1e-3)
    assert fn(100, **kw) == pytest.approx(1e-4)
    values = [fn(s, **kw) for s in range(10, 101)]
    assert all(a >= b - 1e-12 for a, b in zip(values, values[1:]))


def test_wsd_is_flat_until_decay():
    kw = dict(lr=1e-3, min_lr=0.0, warmup=10, total=100, decay_frac=0.2)
    assert wsd_lr(50, **kw) == wsd_lr(79, **kw) == 1e-3
    assert wsd_lr(90, **kw) == pytest.approx(5e-4)


def test_a_decay_of_given_steps_starts_exactly_there():
    from model.schedule import decay_start

    assert decay_start(100, 0.2) == 80 and decay_start(100, 0.2, decay_steps=7) == 93
    kw = dict(lr=2e-3, min_lr=0.0, warmup=0, total=1007, decay_steps=7)  # an anneal branch: step 1000 + 7
    assert wsd_lr(999, **kw) == wsd_lr(1000, **kw) == 2e-3  # the branch's first step: the run's rate
    assert wsd_lr(1001, **kw) == pytest.approx(2e-3 * 6 / 7) and wsd_lr(1007, **kw) == 0.0
