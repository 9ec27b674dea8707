"""qwenref.timing on the CPU: the loops' bookkeeping (which calls run, in which order, what is
divided by what), with a stand-in for CuPy whose events tick a clock; and a clear error where
there is no GPU. The same functions on a GPU: tests/test_gpu_timing.py."""

import types

import pytest

from qwenref import timing


class _Clock:
    """Events whose record() advances a clock by 1 ms and logs what happened, in order."""

    def __init__(self):
        self.t, self.log = 0.0, []
        clock = self

        class Event:
            def record(self, stream=None):
                clock.t += 1.0
                self.t = clock.t
                clock.log.append("event")

            def synchronize(self):
                pass

        class Stream:
            def __init__(self, non_blocking=False):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def begin_capture(self):
                raise RuntimeError("no capture here")

            def end_capture(self):
                raise RuntimeError("not capturing")

            def synchronize(self):
                pass

        self.cp = types.SimpleNamespace(
            cuda=types.SimpleNamespace(
                Event=Event,
                Stream=Stream,
                get_elapsed_time=lambda a, b: b.t - a.t,
                Device=lambda: types.SimpleNamespace(synchronize=lambda: None),
            )
        )


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(timing, "cupy", lambda: c.cp)
    monkeypatch.setattr(timing, "spin_wait", lambda ns: c.log.append("spin"))
    return c


def test_rotations_cover_twice_the_l2():
    assert timing.rotations(100 << 20, 50 << 20) == 1  # already 2 x L2
    assert timing.rotations(10 << 20, 50 << 20) == 10
    assert timing.rotations(3 << 20, 50 << 20) == 34  # rounded up
    assert timing.rotations(1, 50 << 20) == 64  # capped
    assert timing.rotations(10 << 20, 50 << 20, passes=3) == 15


def test_queued_us_spins_before_each_batch_and_rotates_inputs(clock):
    seen = []
    t = timing.queued_us(lambda i: seen.append(i), n_rot=3, batches=4, warmup=2, max_inner=8)
    # each batch: the spin, then the start event, the calls, the end event
    body = clock.log[2:]  # after the sizing call's two events
    assert body == ["spin", "event", "event"] * 4
    assert seen == [0, 1, 2, 0, 1, 2, 0]  # warm-up 2 + sizing 1 + 4 batches of 1
    assert isinstance(t, timing.Timing) and t.us == pytest.approx(1000.0) and t.iqr_us == 0.0


def test_graph_us_replays_a_captured_graph(clock):
    replays = []
    g = types.SimpleNamespace(stream=clock.cp.cuda.Stream(), replay=lambda: replays.append(1))
    t = timing.graph_us(g, batches=3, per_batch=5, warmup=2)
    assert len(replays) == 2 + 3 * 5
    assert t.mode == "graph" and t.us == pytest.approx(1000.0 / 5)


def test_graph_us_runs_the_calls_plainly_when_capture_fails(clock):
    calls = []
    t = timing.graph_us([lambda: calls.append("a"), lambda: calls.append("b")], batches=2)
    assert t.mode == "loop (RuntimeError)"
    assert calls == ["a", "b"] * 3  # once before capture, then per batch
    assert t.us == pytest.approx(1000.0 / 2)  # per call


def test_stage_us_spins_at_start_and_times_each_stage(clock):
    class Layer:
        def forward(self, x, base_pos, cache, on_stage=None):
            assert (x, base_pos, cache) == ("x", 7, "cache")
            on_stage("start")
            for name in ("input_norm", "qkv_proj", "attention"):
                clock.log.append(name)
                on_stage(name)
            return "y"

    y, times = timing.stage_us(Layer(), "x", 7, "cache", spin_us=3)
    assert y == "y"
    assert clock.log == [
        "spin",
        "event",
        "input_norm",
        "event",
        "qkv_proj",
        "event",
        "attention",
        "event",
    ]
    assert times == {"input_norm": 1000.0, "qkv_proj": 1000.0, "attention": 1000.0, "total": 3000.0}


def test_eager_us_times_each_call_alone(clock):
    n = []
    t = timing.eager_us(lambda: n.append(1), batches=5)
    assert len(n) == 5 and "spin" not in clock.log and t.us == pytest.approx(1000.0)


def test_without_a_gpu_timing_says_what_is_missing():
    from qwenref.gpu import available

    if available():
        pytest.skip("a GPU is present")
    for call in (
        lambda: timing.spin_wait(1000),
        lambda: timing.queued_us(lambda i: None),
        lambda: timing.copy_gbps(),
        lambda: timing.floor_us(1 << 20),
    ):
        with pytest.raises(RuntimeError, match="CuPy|CUDA"):
            call()
