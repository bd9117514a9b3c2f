"""A real Prometheus holding generated history: series written as OpenMetrics, turned into TSDB blocks by
`promtool tsdb create-blocks-from openmetrics`, and served by Debian's prometheus on a free port."""

from __future__ import annotations

import math
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.monitoring.conftest import find_tool
from tests.support.servers import free_port

GIB = 1024**3
STEP_SECONDS = 120


class History:
    """Series to backfill: name{labels} -> value at each step from start to end (unix seconds)."""

    def __init__(self, *, end: float) -> None:
        self.end = end
        self.series: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {}

    def add(self, metric: str, labels: dict[str, str], value: Callable[[float], float], *, hours: float) -> None:
        start = self.end - hours * 3600
        points = []
        at = math.ceil(start / STEP_SECONDS) * STEP_SECONDS
        while at <= self.end:
            points.append((at, value((at - start) / 3600)))
            at += STEP_SECONDS
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        self.series.setdefault(metric, []).append((text, points))

    def openmetrics(self) -> str:
        lines = []
        for metric, series in self.series.items():  # a family's samples together, each series in time order
            for labels, points in series:
                lines += [f"{metric}{{{labels}}} {value!r} {at:.0f}" for at, value in points]
        return "\n".join(lines) + "\n# EOF\n"


class BackfilledPrometheus:
    """Prometheus over the blocks promtool made from a History; stop() ends it."""

    def __init__(self, work: Path, history: History) -> None:
        source = work / "history.om"
        source.write_text(history.openmetrics())
        data = work / "data"
        subprocess.run([find_tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       check=True, capture_output=True, timeout=300)
        (work / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - open while it runs; stop() closes it
        self.process = subprocess.Popen(
            [find_tool("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=30d"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"prometheus did not get ready: {(work / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()
