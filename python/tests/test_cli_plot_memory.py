# The CLI's picture (spcg solve --plot) is valid SVG with a polyline per column, read by Python's own XML parser;
# and a Python process does not grow over 1000 small solves (the module's conversions and results are freed).
import os
import pathlib
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import spcg

from conftest import gpu_available

REPO = pathlib.Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


def spcg_binary():
    for p in (os.environ.get("SPCG_BINARY"), REPO / "build" / "apps" / "spcg"):
        if p and pathlib.Path(p).exists():
            return str(p)
    pytest.skip("the spcg CLI is not built (build/apps/spcg; SPCG_BINARY names another)")


@pytest.mark.parametrize("backend", ["host", "gpu"])
def test_cli_plot_is_valid_svg(tmp_path, backend):
    if backend == "gpu" and not gpu_available():
        pytest.skip("no usable GPU: the GPU backend's history is drawn on a GPU machine")
    out = tmp_path / "residuals.svg"
    args = [spcg_binary(), "solve", "--generate", "poisson2d:30", "--backend", backend, "--plot", str(out)]
    if backend == "gpu":
        args += ["--solver", "block-cg", "--nrhs", "3", "--rhs", "random"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    root = ET.parse(out).getroot()  # raises on anything that is not well-formed XML
    assert root.tag == SVG + "svg"
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0
    assert any("poisson2d:30" in (t.text or "") for t in root.iter(SVG + "text"))
    lines = [e for e in root.iter(SVG + "polyline") if e.get("class") == "column"]
    if backend == "host":
        assert not lines and any("no residual history" in (t.text or "") for t in root.iter(SVG + "text"))
    else:
        assert len(lines) == 3
        for e in lines:
            xs = [float(pt.split(",")[0]) for pt in e.get("points").split()]
            assert len(xs) > 2 and xs == sorted(xs)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_memory_growth_over_1000_small_solves(poisson):
    solver = spcg.Solver(poisson, precond="jacobi")
    b = np.ones(poisson.shape[0])
    for _ in range(100):  # warm: allocators and caches reach their working size
        solver.solve(b)
        spcg.cg(poisson, b)
    before = rss_bytes()
    for _ in range(1000):
        x, _ = solver.solve(b)
        x2, info = spcg.cg(poisson, b)
    grown = rss_bytes() - before
    assert info == 0 and np.isfinite(x).all()
    # one solve's arrays are ~10 KB: a leak of one of them per call would show as 10 MB
    assert grown < 4 << 20, f"resident memory grew {grown / 2**20:.1f} MiB over 1000 solves"
