"""One Prometheus with the scenarios' history for every right-sizing test."""

import pytest

from .history import BackfilledPrometheus
from .scenarios import history


@pytest.fixture(scope="package")
def prometheus(tmp_path_factory):
    server = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), history())
    yield server
    server.stop()
