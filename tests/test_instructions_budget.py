"""Instructions per admission served by one gunicorn worker stay under a ceiling (issue 36).

Counted by valgrind's callgrind (scripts/bench_instructions.py, served mode: the project's gunicorn config,
one worker, plain HTTP, PostgreSQL, the bench's mix of four Pods), so the count does not depend on how busy
the machine is. Fewer admissions than the bench's default (60 after 12), audit off and on.

The issue's budget is 900,000 instructions per admission unaudited and 1,150,000 audited. Until the code
reaches it, the ceilings here are the count measured when this test was written plus 3 %: a guard against
regressions, to be lowered to the budget as cuts land (the measurements: docs/benchmarks.md, "Instructions
per admission"). The bench holds the worker's periodic work (the audit writer's cycle, the configuration's
recheck) off while admissions are counted and writes each review in one write, so a build's count moves by
well under 1 % between runs, quiet or with the machine's cores busy (it moved by up to 7 % before); a few
percent over the ceiling is a change on the request path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import database_drop

REPO = Path(__file__).resolve().parent.parent

BUDGET = {"audit off": 900_000, "audit on": 1_150_000}
# Measured last (2026-12-05 11:20 UTC, scripts/bench-instructions, 200 admissions after 20, with the worker loop
# of fbe3753): under the budget, so the ceilings are the budget.
MEASURED_OFF = 546_885
MEASURED_ON = 656_646
CEILING = {case: BUDGET[case] if measured <= BUDGET[case] else int(measured * 1.03)
           for case, measured in (("audit off", MEASURED_OFF), ("audit on", MEASURED_ON))}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("valgrind") is None,
                       reason="valgrind is not installed (scripts/bench-instructions installs it)"),
]


@pytest.fixture(scope="module")
def served_counts() -> dict[str, float]:
    """Instructions per admission served, audit off and on, in the bench's own environment: not the tests'
    (tests/testenv.py rereads the configuration on every admission and keeps the audit writer stopped)."""
    url = f"postgres://postgres@127.0.0.1:5432/volcano_injector_instructions_{os.getpid()}"
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    try:
        done = subprocess.run(
            [str(REPO / ".venv" / "bin" / "python"), str(REPO / "scripts" / "bench_instructions.py"),
             "--modes", "served", "--admissions", "60", "--warmup", "12", "--database-url", url, "--json"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    finally:
        database_drop(url)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    return {case: row["served"] for case, row in results.items()}


@pytest.mark.parametrize("case", ["audit off", "audit on"])
def test_an_admission_served_stays_under_its_instruction_ceiling(served_counts, case):
    per_admission = served_counts[case]
    assert per_admission <= CEILING[case], (
        f"{per_admission:,.0f} instructions per admission served ({case}), over the ceiling of "
        f"{CEILING[case]:,} (the budget: {BUDGET[case]:,}); scripts/bench-instructions shows the stages")
