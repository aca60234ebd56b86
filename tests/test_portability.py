"""The tests that compare output with golden files or with another process, run again under
other float code paths, so a test that holds only on this machine's path fails here, in CI, and
not on a user's machine.

Another CPU rounds float32 differently in the last bit: its BLAS (MKL) takes another kernel, or
torch's own vectorised kernels another instruction set. Both can be chosen on one machine:
MKL_CBWR picks MKL's code path (COMPATIBLE: SSE2 only, the same on every x86 CPU; AVX2), and
ATEN_CPU_CAPABILITY torch's (`default`: no vector instructions). Each is read when the library
starts, so each setting needs a fresh process: a pytest of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.cli import REPO, SPECS

SPEC_COUNT = len(list(SPECS.glob("*.yaml")))

# The golden files (a report, a diff, the walk's JSON and timeline per spec, walk --ranks 2's)
# and the byte-identical outputs across processes with different hash seeds and thread counts.
TESTS = [
    "tests/render/test_report.py::test_report_matches_its_golden_file",
    "tests/render/test_report.py::test_diff_matches_its_golden_file",
    "tests/render/test_walk_golden.py",
    "tests/render/test_distributed_render.py::test_golden",
    "tests/test_determinism.py::test_every_output_is_byte_identical_across_processes",
]
# A report and a diff per spec, the walk's JSON and timeline per spec and two Python models'
# JSON, walk --ranks 2's text and JSON under DDP and FSDP2, and the determinism test.
EXPECTED_PASSED = 4 * SPEC_COUNT + 2 + 2 + 1

FLOAT_PATHS = {
    "mkl-compatible": {"MKL_CBWR": "COMPATIBLE"},
    "mkl-avx2": {"MKL_CBWR": "AVX2"},
    # On the machine this was written on (AVX-512), this path changed digits in 6 golden files
    # before they were compared with a tolerance.
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
}


@pytest.mark.parametrize("name", sorted(FLOAT_PATHS))
def test_golden_and_determinism_tests_hold_on_another_float_path(name: str) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY")}
    env.update(FLOAT_PATHS[name])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    tail = "\n".join(done.stdout.splitlines()[-40:])
    assert done.returncode == 0, f"under {FLOAT_PATHS[name]}:\n{tail}\n{done.stderr[-2000:]}"
    passed = re.search(r"(\d+) passed", done.stdout)
    assert passed is not None and int(passed.group(1)) == EXPECTED_PASSED, tail
