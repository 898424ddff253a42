# Ctrl-C on the host backend (Eigen cannot be interrupted: KeyboardInterrupt when its solve ends, the Solver kept;
# the GPU's interruption between residual checks is tested in test_device.py) and result.plot().
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
from conftest import relres

import spcg


def send_sigint_after(seconds):
    """SIGINT to this process from a helper thread after `seconds` (Python's handler runs on the main thread)."""
    t = threading.Timer(seconds, os.kill, args=(os.getpid(), signal.SIGINT))
    t.daemon = True
    t.start()
    return t


def test_ctrl_c_on_the_host_backend_raises_when_the_solve_ends_and_the_solver_stays_usable():
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")
    A = spcg.generate("poisson2d:200")
    b = np.ones(A.shape[0])
    solver = spcg.Solver(A, precond="none", backend="host", rtol=0.0)
    # long enough that the signal surely lands inside the solve: 40x the delay, measured on this machine
    t0 = time.perf_counter()
    solver.solve(b, maxiter=50)
    per_iteration = (time.perf_counter() - t0) / 50
    delay = 0.05
    maxiter = int(40 * delay / per_iteration) + 50
    timer = send_sigint_after(delay)
    try:
        with pytest.raises(KeyboardInterrupt):
            solver.solve(b, maxiter=maxiter)
    finally:
        timer.cancel()
    x, r = solver.solve(b, rtol=1e-8, maxiter=10000)  # the setup kept: solves again
    assert r.converged and relres(A, x, b) <= 1.5e-8


def test_the_interrupt_hook_runs_pythons_signal_handlers(poisson):
    # what the GPU monitor asks at its residual checks, asked here directly (the host backend never asks it)
    native = spcg.Solver(poisson, backend="host")._native

    class Stop(Exception):
        pass

    def raising(signum, frame):
        raise Stop("from the handler")

    seen = []
    old = signal.signal(signal.SIGUSR1, raising)
    try:
        timer = threading.Timer(0.02, os.kill, args=(os.getpid(), signal.SIGUSR1))
        timer.start()
        asked, kept = native._poll_interrupt(300)  # the signal arrives while the GIL is released
        timer.join()
        assert asked and isinstance(kept, Stop) and str(kept) == "from the handler"
        signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))  # a handler that does not raise
        timer = threading.Timer(0.02, os.kill, args=(os.getpid(), signal.SIGUSR1))
        timer.start()
        asked, kept = native._poll_interrupt(300)
        timer.join()
        assert (asked, kept) == (False, None) and seen == [signal.SIGUSR1]  # it ran; the solve would go on
        assert native._poll_interrupt(0) == (False, None)  # nothing pending
    finally:
        signal.signal(signal.SIGUSR1, old)
    answers = []  # off the main thread: Python runs no handler there, so the hook never takes the GIL
    worker = threading.Thread(target=lambda: answers.append(native._poll_interrupt(0)))
    worker.start()
    worker.join()
    assert answers == [(False, None)]


def test_plot_without_history_says_how_to_get_one(poisson):
    _, r = spcg.Solver(poisson, precond="none").solve(np.ones(poisson.shape[0]))
    with pytest.raises(ValueError, match="keep_history=True"):
        r.plot()


def test_plot_without_matplotlib_is_a_clear_import_error(poisson, monkeypatch):
    _, r = spcg.Solver(poisson, precond="none").solve(np.ones(poisson.shape[0]))
    r.history = [[(0, 1.0), (8, 0.1)]]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(ImportError, match="needs matplotlib"):
        r.plot()


def history_result(poisson, k):
    """A result with a residual history: the GPU backend keeps one; the host backend (Eigen) keeps none, so
    there the history is one made here (the drawing is what is tested)."""
    n = poisson.shape[0]
    B = np.random.default_rng(8).standard_normal((n, k))
    solver = spcg.Solver(poisson, precond="none", rtol=1e-8, keep_history=True, expected_columns=k)
    _, r = solver.solve(B)
    if not any(r.history):
        assert solver.backend == "host"
        r.history = [[(it, r.b_norm[j] * 0.5**(it / 4)) for it in range(0, 8 * (j + 10), 8)] for j in range(k)]
    return r


@pytest.mark.parametrize("relative", [True, False])
def test_plot_draws_every_columns_history_on_a_log_scale(poisson, tmp_path, relative):
    matplotlib = pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = history_result(poisson, 3)
    ax = r.plot(relative=relative)
    try:
        assert ax.get_yscale() == "log"
        lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("column")]
        assert len(lines) == 3
        for j, line in enumerate(lines):
            it, rn = zip(*r.history[j])
            np.testing.assert_array_equal(line.get_xdata(), it)
            expected = np.array(rn) / (r.b_norm[j] if relative else 1.0)
            np.testing.assert_allclose(line.get_ydata(), expected, rtol=4 * np.finfo(float).eps)
        target = [ln for ln in ax.get_lines() if ln.get_label() == "target"]
        assert relative == (len(target) == 1)  # one target line when every column has the same one
        if relative:
            assert target[0].get_ydata()[0] == pytest.approx(1e-8)
        out = tmp_path / "history.svg"
        ax.figure.savefig(out)
        assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()
    finally:
        plt.close(ax.figure)


def test_plot_into_given_axes_and_an_exact_zero(poisson):
    matplotlib = pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = history_result(poisson, 1)
    r.history = [list(r.history[0]) + [(r.history[0][-1][0] + 8, 0.0)]]  # a zero residual: no point on a log axis
    fig, ax = plt.subplots()
    try:
        assert r.plot(ax=ax, title="mine") is ax
        assert ax.get_title() == "mine"
        y = ax.get_lines()[0].get_ydata()
        assert np.isnan(y[-1]) and np.all(y[:-1] > 0)
    finally:
        plt.close(fig)
