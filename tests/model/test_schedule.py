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
