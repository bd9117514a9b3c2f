"""The database settings, read from the environment: where the app connects, and how its pooler behaves.

- DATABASE_URL (or DB_HOST, DB_PORT, DB_NAME, DB_USER, DB_PASSWORD, each also as NAME_FILE): the
  connection the app uses, perhaps through a connection pooler. The URL may list several hosts
  (`postgres://u:p@db-1:5432,db-2:5432/name`) and carry libpq parameters as its query
  (`?target_session_attrs=read-write&sslmode=require`): libpq then tries the hosts in turn.
- DATABASE_DIRECT_URL: a session on the primary that bypasses the pooler, for what needs one
  (`apply_migrations` holds a session advisory lock). It becomes the database alias `direct`.
- DB_POOL_MODE: `session` (a direct connection or a session pool: the default) or `transaction`
  (PgBouncer's transaction pooling: consecutive transactions may run on different server sessions).

What transaction pooling changes, path by path, and why: docs/database-pooling.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from injector_site.platform.env import env, env_int

POOL_MODES = ("session", "transaction")
# OPTIONS keys that Django's PostgreSQL backend reads itself; every other key is a libpq parameter.
DJANGO_OPTION_KEYS = frozenset({"isolation_level", "server_side_binding", "assume_role", "pool",
                                "prepare_threshold", "cursor_factory", "context"})


def pool_mode_from_env() -> str:
    """DB_POOL_MODE: how the pooler between the app and PostgreSQL (if any) hands out server sessions."""
    mode = (env("DB_POOL_MODE") or "session").strip().lower() or "session"
    if mode not in POOL_MODES:
        raise ImproperlyConfigured(
            f"DB_POOL_MODE={mode!r} is not supported: use session (a direct connection or a session pool) or "
            "transaction (PgBouncer pool_mode=transaction); statement pooling breaks the audit writer's transactions"
        )
    return mode


def postgres_url_parse(url: str, *, name: str = "DATABASE_URL") -> dict[str, Any]:
    """A postgres:// URL as Django settings: several hosts become libpq's host and port lists, and the
    query's parameters become OPTIONS (libpq connection parameters)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(
            f"{name} scheme {parts.scheme!r} is not supported: use postgres://user:password@host:5432/name"
        )
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    hosts, ports = [], []
    for item in hostlist.split(","):
        host, port = _host_port(item, name=name)
        hosts.append(host)
        ports.append(port)
    options: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    for key in DJANGO_OPTION_KEYS & options.keys():
        raise ImproperlyConfigured(f"{name} parameter {key!r} is not a libpq connection parameter")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": ",".join(hosts),
        # libpq wants one port for every host, or a single one for all of them.
        "PORT": ",".join(ports) if any(ports) else "",
        "OPTIONS": options,
    }


def _host_port(item: str, *, name: str) -> tuple[str, str]:
    if item.startswith("["):  # [IPv6]:port
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise ImproperlyConfigured(f"{name} port {port!r} is not a number")
    return unquote(host), port


def database_from_env(base_dir: Path) -> dict[str, Any]:
    """The `default` database: DATABASE_URL, else DB_* variables, else the embedded SQLite default."""
    url = env("DATABASE_URL")
    if url:
        config = postgres_url_parse(url)
    elif env("DB_HOST") or env("DB_NAME"):
        config = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": env("DB_NAME", "volcano_injector"),
            "USER": env("DB_USER", "postgres"),
            "PASSWORD": env("DB_PASSWORD", ""),
            "HOST": env("DB_HOST", "127.0.0.1"),
            "PORT": env("DB_PORT", "5432"),
            "OPTIONS": {},
        }
    else:
        sqlite_path = Path(env("SQLITE_PATH", str(base_dir / "var" / "db.sqlite3")))
        sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path)}
    config.update(
        {
            # Persistent connections: /mutate must not pay a connection setup per request. Through a
            # transaction pooler they are client connections to the pooler, which is what it wants.
            "CONN_MAX_AGE": env_int("DB_CONN_MAX_AGE", 300),
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {
                # A dead database must fail fast: the webhook answers within the API server's timeout.
                "connect_timeout": env_int("DB_CONNECT_TIMEOUT_SECONDS", 2),
                **config["OPTIONS"],
            },
            "TEST": {"NAME": env("DB_TEST_NAME", "test_volcano_injector")},
        }
    )
    return config


def direct_database_from_env() -> dict[str, Any] | None:
    """The `direct` database (DATABASE_DIRECT_URL): the same database as `default`, in a session of its own."""
    url = env("DATABASE_DIRECT_URL")
    if not url:
        return None
    config = postgres_url_parse(url, name="DATABASE_DIRECT_URL")
    config.update({
        "CONN_MAX_AGE": 0,  # used by management commands, seldom: no connection kept open
        "OPTIONS": {"connect_timeout": env_int("DB_CONNECT_TIMEOUT_SECONDS", 2), **config["OPTIONS"]},
        # The same database as default: tests must not create a second one.
        "TEST": {"MIRROR": "default"},
    })
    return config


def session_database() -> str:
    """The database alias for reads that need a session of their own (a cursor fetched over several
    statements): `direct` behind a transaction pooler when DATABASE_DIRECT_URL is set, else `default`."""
    from django.conf import settings

    if settings.DB_POOL_MODE == "transaction" and "direct" in settings.DATABASES:
        return "direct"
    return "default"


def libpq_params(database: dict[str, Any]) -> dict[str, Any]:
    """psycopg.connect() keywords for a Django database setting (host lists and OPTIONS included)."""
    params: dict[str, Any] = {k: v for k, v in database.get("OPTIONS", {}).items() if k not in DJANGO_OPTION_KEYS}
    params.update({
        "dbname": database["NAME"],
        "host": database.get("HOST") or None,
        "port": database.get("PORT") or None,
        "user": database.get("USER") or None,
        "password": database.get("PASSWORD") or None,
    })
    return {k: v for k, v in params.items() if v is not None}
