"""The progress bar: what it prints on a pipe, and its estimate of the time left."""
import io

from tensorforge.progress import Progress


def test_pipe_output_is_line_based_and_ends_with_the_final_count():
    out = io.StringIO()
    with Progress("tuning k0", total=4, stream=out, log_every_s=1e9) as bar:
        for i in range(4):
            bar.advance(1, note=f"best {i} GFLOP/s")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2                      # the first draw and the close, nothing in between
    assert "0/4" in lines[0] and "4/4" in lines[-1] and "best 3 GFLOP/s" in lines[-1]
    assert "\r" not in out.getvalue()


def test_eta_is_proportional_to_the_steps_left():
    bar = Progress("x", total=10, enabled=False)
    bar.start -= 2.0                            # pretend 2 s have passed
    bar.advance(4)
    assert abs(bar.eta_s() - 3.0) < 0.1         # 0.5 s a step, 6 steps left
    assert Progress("y", total=None, enabled=False).eta_s() is None


def test_disabled_bar_writes_nothing():
    out = io.StringIO()
    with Progress("quiet", total=3, stream=out, enabled=False) as bar:
        bar.advance(3)
    assert out.getvalue() == ""
