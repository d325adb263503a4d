"""The int8 and bf16 kernels fork their own OpenMP teams; a model compiled for fewer threads than
the machine has keeps to them (their ``num_threads`` is capped by ``omp_get_max_threads``, which
``compile(threads=...)`` sets).  They used to fix the team at the core count."""
import os
import subprocess
import sys
import textwrap

import pytest

from tensorforge.codegen.c import qgemm
from tensorforge.codegen.c.conv_helpers import team
from tensorforge.codegen.target import Target

pytest.importorskip("torch")


def test_team_clause_is_capped_by_the_callers_setting():
    assert team(2) == "num_threads(2 < omp_get_max_threads() ? 2 : omp_get_max_threads())"
    src = qgemm.source("tf_q", Target.host(), False, threads=4)
    assert "num_threads(4)" not in src and team(4) in src


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to tell one thread from two")
def test_a_one_thread_int8_model_uses_one_core():
    """CPU time over wall time of 100 calls in a fresh process: about 1 with threads=1 (it was
    about 2 on two cores: the int8 convolution forked a team of two)."""
    code = textwrap.dedent("""
        import time, numpy as np, torch, tensorforge
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, 1, 1), torch.nn.ReLU()).eval()
        rng = np.random.default_rng(0)
        samples = [rng.standard_normal((1, 64, 56, 56)).astype(np.float32) for _ in range(2)]
        x = torch.from_numpy(samples[0])
        q = tensorforge.quantize(m, samples, (x,), keep_first_last=False)
        cm = tensorforge.compile(q, (x,), threads=1)
        assert "tf_qconv" in cm.source
        xn = x.numpy(); cm(xn)
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(100): cm(xn)
        print((time.process_time() - c0) / (time.perf_counter() - w0))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    ratio = float(out.stdout.strip().splitlines()[-1])
    assert ratio < 1.4, f"CPU time {ratio:.2f}x wall time with threads=1"
