import numpy as np

from training.schedule import InverseSquareRootSchedule


def test_warmup_then_inverse_square_root():
    schedule = InverseSquareRootSchedule(d_model=512, warmup_steps=4000, scale=1.0)
    lr = np.array([float(schedule(s)) for s in range(0, 20000, 50)])
    steps = np.arange(0, 20000, 50) + 1.0
    expected = 512**-0.5 * np.minimum(steps**-0.5, steps * 4000**-1.5)
    np.testing.assert_allclose(lr, expected, rtol=1e-5)
    peak = int(np.argmax(lr))
    assert abs(steps[peak] - 4000) <= 50
    assert np.all(np.diff(lr[: peak - 1]) > 0) and np.all(np.diff(lr[peak + 1 :]) < 0)


def test_accumulation_counts_updates_not_micro_batches():
    plain = InverseSquareRootSchedule(256, 100, scale=2.0)
    accumulated = InverseSquareRootSchedule(256, 100, scale=2.0, accumulation_steps=4)
    for update in (0, 7, 99, 500):
        for micro in range(4):
            assert float(accumulated(update * 4 + micro)) == float(plain(update))
    assert (
        InverseSquareRootSchedule.from_config(accumulated.get_config()).get_config()
        == accumulated.get_config()
    )
