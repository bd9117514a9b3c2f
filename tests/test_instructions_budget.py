"""Instructions per admission served by one gunicorn worker stay under a ceiling (issue 36).

Counted by valgrind's callgrind (scripts/bench_instructions.py, served mode: the project's gunicorn config,
one worker, plain HTTP, PostgreSQL, the bench's mix of four Pods), so the count does not depend on how busy
the machine is. Fewer admissions than the bench's default (60 after 12), audit off and on.

The issue's budget is 900,000 instructions per admission unaudited and 1,150,000 audited. Until the code
reaches it, the ceilings here are the count measured when this test was written plus 3 %: a guard against
regressions, to be lowered to the budget as cuts land (the measurements: docs/benchmarks.md, "Instructions
per admission").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.servers import database_drop, database_recreate

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

BUDGET = {"audit off": 900_000, "audit on": 1_150_000}
# Measured when written (2026-12-05 00:12 UTC, 60 admissions after 12, scripts/bench-instructions --modes served
# --admissions 60 --warmup 12 on the branch cuts), plus 3 %, while above the budget.
MEASURED_OFF = 1_384_743
MEASURED_ON = 1_722_170
CEILING = {"audit off": min(BUDGET["audit off"], int(MEASURED_OFF * 1.03)),
           "audit on": min(BUDGET["audit on"], int(MEASURED_ON * 1.03))}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("valgrind") is None,
                       reason="valgrind is not installed (scripts/bench-instructions installs it)"),
]


@pytest.fixture(scope="module")
def bench_database():
    url = f"postgres://postgres@127.0.0.1:5432/volcano_injector_instructions_{os.getpid()}"
    database_recreate(url)
    yield url
    database_drop(url)


@pytest.mark.parametrize("audit", [False, True], ids=["audit off", "audit on"])
def test_an_admission_served_stays_under_its_instruction_ceiling(bench_database, tmp_path, audit):
    import bench_instructions

    args = argparse.Namespace(admissions=60, warmup=12, database_url=bench_database)
    work = tmp_path / "work"
    work.mkdir()
    per_admission = bench_instructions.served(args, audit=audit, work=work)
    case = "audit on" if audit else "audit off"
    assert per_admission <= CEILING[case], (
        f"{per_admission:,.0f} instructions per admission served ({case}), over the ceiling of "
        f"{CEILING[case]:,} (the budget: {BUDGET[case]:,}); scripts/bench-instructions shows the stages")
