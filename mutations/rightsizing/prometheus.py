"""A small reader of Prometheus' HTTP API (/api/v1/query, /api/v1/query_range) for the right-sizing reports.

urllib only: two GET endpoints with a bearer token and a CA do not need a client library. Every failure
(refused, timed out, a 4xx/5xx, an answer that is not Prometheus') becomes PrometheusUnavailable with a
sentence an operator can act on. Nothing on the /mutate path imports this module.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path


class PrometheusUnavailable(Exception):
    """Prometheus could not answer a query: unreachable, too slow, refused the query or answered garbage."""


@dataclass(frozen=True)
class PrometheusConfig:
    """Where Prometheus is and how to reach it (settings PROMETHEUS_*)."""

    url: str
    token_file: str = ""
    ca_file: str = ""
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class Series:
    """One series of an answer: its labels and its (unix seconds, value) samples (one for an instant query)."""

    labels: dict[str, str]
    samples: tuple[tuple[float, float], ...]

    @property
    def value(self) -> float:
        return self.samples[-1][1]


class PrometheusReader:
    """Instant and range queries against one Prometheus; each call is one HTTP GET bounded by the timeout."""

    def __init__(self, config: PrometheusConfig) -> None:
        if not config.url:
            raise PrometheusUnavailable("PROMETHEUS_URL is not set: no usage can be read")
        self.config = config
        self.base = config.url.rstrip("/")
        self._context = ssl.create_default_context(cafile=config.ca_file or None) if self.base.startswith(
            "https:") else None

    def query(self, expr: str, *, at: float) -> list[Series]:
        """An instant query evaluated at `at` (unix seconds): range functions over a window ending there."""
        return self._get("query", {"query": expr, "time": f"{at:.3f}"})

    def query_range(self, expr: str, *, start: float, end: float, step_seconds: int) -> list[Series]:
        """A range query: the expression at every step from start to end."""
        return self._get("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": str(step_seconds)})

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.config.token_file:
            try:
                token = Path(self.config.token_file).read_text().strip()
            except OSError as exc:
                raise PrometheusUnavailable(f"PROMETHEUS_TOKEN_FILE {self.config.token_file}: {exc.strerror}") from None
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _get(self, endpoint: str, params: dict[str, str]) -> list[Series]:
        # The query's own timeout too, so Prometheus stops evaluating when we stop waiting.
        params = {**params, "timeout": f"{self.config.timeout_seconds:g}s"}
        # POST, form-encoded (Prometheus takes both): a group's Pod regex can be longer than a URL may be.
        request = urllib.request.Request(f"{self.base}/api/v1/{endpoint}", data=urllib.parse.urlencode(params).encode(),
                                         headers={**self._headers(),
                                                  "Content-Type": "application/x-www-form-urlencoded"})
        where = f"Prometheus at {self.base}"
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_seconds,
                                        context=self._context) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc.read())
            raise PrometheusUnavailable(f"{where} answered {exc.code} to {params['query']!r}: {detail}") from None
        except TimeoutError:
            raise PrometheusUnavailable(f"{where} did not answer within {self.config.timeout_seconds:g} s "
                                        "(PROMETHEUS_TIMEOUT_SECONDS)") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise PrometheusUnavailable(f"{where} did not answer within {self.config.timeout_seconds:g} s "
                                            "(PROMETHEUS_TIMEOUT_SECONDS)") from None
            raise PrometheusUnavailable(f"{where} is unreachable: {reason}") from None
        try:
            answer = json.loads(body)
            data = answer["data"]
            results = data["result"]
        except (ValueError, KeyError, TypeError):
            raise PrometheusUnavailable(f"{where} answered something that is not Prometheus' API") from None
        if answer.get("status") != "success":
            raise PrometheusUnavailable(f"{where}: {answer.get('error', 'query failed')}")
        if data.get("resultType") not in ("vector", "matrix"):
            return []
        found = []
        for item in results:
            samples = item.get("values") or ([item["value"]] if "value" in item else [])
            found.append(Series(dict(item.get("metric", {})), tuple((float(t), float(v)) for t, v in samples)))
        return found


def _error_text(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", "")) or body[:200].decode(errors="replace")
    except ValueError:
        return body[:200].decode(errors="replace")
