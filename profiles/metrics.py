"""Configuration metrics, defined once: which configuration version each process uses, and whether it can read it.

Here and not in mutations/metrics.py because the configuration layer sets them (profiles/catalog.py)
and may not import the audit store. README.md ("Metrics") lists them with the others.
"""

from __future__ import annotations

from prometheus_client import Gauge

# liveall: one series per live gunicorn worker (a `pid` label), so a worker still on an older version
# shows beside the others (min and max by instance on the dashboard). Any one-series mode would hide
# it, and a dead worker's version would linger in the non-live modes; child_exit marks dead workers.
# 0 until the process has loaded a configuration; -1 while it answers from the built-in defaults.
CONFIG_VERSION = Gauge(
    "volcano_injector_config_version",
    "The configuration version this process uses (0: none loaded yet; -1: built-in defaults, the database "
    "was unreadable at its first load).",
    multiprocess_mode="liveall",
)
# livemax: 1 for a replica when any of its live workers cannot read the configuration.
CONFIG_UNREADABLE = Gauge(
    "volcano_injector_config_unreadable",
    "1 while this process's last configuration check failed (the database is unreadable; the last good "
    "configuration, or the built-in defaults, stays in use), else 0.",
    multiprocess_mode="livemax",
)
