"""qwenref.timing on a GPU: the spin kernel holds the GPU for the time asked, and each
measurement returns a plausible positive time (the layer's per-stage times and a DecodeGraph's
replays are in tests/test_gpu_layer.py)."""

import pytest

from qwenref import timing

pytestmark = pytest.mark.gpu


def test_spin_wait_holds_the_gpu(cp):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    timing.spin_wait(1000)  # compile and load first
    cp.cuda.Device().synchronize()
    a.record()
    timing.spin_wait(2_000_000)
    b.record()
    b.synchronize()
    assert 1.9 <= cp.cuda.get_elapsed_time(a, b) < 50  # ms


def test_queued_us_rotates_and_times(cp):
    xs = [cp.random.random(1 << 20, dtype=cp.float32) for _ in range(3)]
    ys = [cp.empty_like(x) for x in xs]
    seen = set()

    def fn(i):
        seen.add(i)
        cp.multiply(xs[i], 2, out=ys[i])

    t = timing.queued_us(fn, n_rot=3, batches=5)
    assert seen == {0, 1, 2}
    assert 0 < t.us < 1e4 and t.iqr_us >= 0


def test_graph_us_captures_and_replays(cp):
    x = cp.random.random(1 << 20, dtype=cp.float32)
    y = cp.empty_like(x)
    t = timing.graph_us([lambda: cp.multiply(x, 2, out=y)] * 4, batches=5)
    assert t.mode == "graph" and 0 < t.us < 1e4
    cp.testing.assert_array_equal(y, 2 * x)


def test_eager_us(cp):
    x = cp.random.random(1 << 20, dtype=cp.float32)
    assert 0 < timing.eager_us(lambda: cp.multiply(x, 2, out=x), batches=5).us < 1e5


def test_copy_gbps_is_a_device_copy_rate():
    assert 50 < timing.copy_gbps(nbytes=256 << 20, batches=5) < 20_000  # GB/s


def test_floor_us_queued_and_graph():
    f = timing.floor_us(8 << 20, n_rot=3, batches=5, graph_calls=4)
    assert f.us > 0 and f.iqr_us >= 0
    assert f.graph_mode == "graph" and f.graph_us > 0
    assert timing.floor_us(8 << 20, batches=3).graph_us is None
