"""injector_site/platform/database.py: database settings from the environment, host lists and pooler modes."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from injector_site.platform.database import (
    database_from_env,
    direct_database_from_env,
    libpq_params,
    pool_mode_from_env,
    postgres_url_parse,
)

VARIABLES = ("DATABASE_URL", "DATABASE_DIRECT_URL", "DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "DB_PASSWORD",
             "DB_POOL_MODE", "DB_CONNECT_TIMEOUT_SECONDS", "DB_CONN_MAX_AGE", "DB_TEST_NAME", "SQLITE_PATH")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)


def test_a_url_with_one_host_gives_django_its_parts():
    config = postgres_url_parse("postgres://injector:s%40cret@db.example:6432/injector")
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"], config["PASSWORD"]) == (
        "db.example", "6432", "injector", "injector", "s@cret")
    assert config["OPTIONS"] == {}


def test_a_url_listing_several_hosts_becomes_libpqs_host_and_port_lists():
    config = postgres_url_parse("postgresql://u:p@db-1:5432,db-2:5433,[::1]:5434/app"
                                "?target_session_attrs=read-write&sslmode=require")
    assert config["HOST"] == "db-1,db-2,::1"
    assert config["PORT"] == "5432,5433,5434"
    assert config["OPTIONS"] == {"target_session_attrs": "read-write", "sslmode": "require"}


def test_hosts_without_ports_use_the_default_port():
    config = postgres_url_parse("postgres://u@db-1,db-2/app")
    assert (config["HOST"], config["PORT"]) == ("db-1,db-2", "")


@pytest.mark.parametrize("url, message", [
    ("mysql://u@db/app", "DATABASE_URL scheme 'mysql' is not supported"),
    ("postgres://u@db:fast/app", "DATABASE_URL port 'fast' is not a number"),
    ("postgres://u@db/app?pool=true", "DATABASE_URL parameter 'pool' is not a libpq connection parameter"),
])
def test_a_url_that_cannot_work_is_an_error_naming_what_is_wrong(url, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        postgres_url_parse(url)


def test_database_url_keeps_the_connection_defaults_and_lets_the_url_override_them(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgres://u@db-1,db-2/app?connect_timeout=5&target_session_attrs=read-write")
    config = database_from_env(tmp_path)
    assert config["OPTIONS"] == {"connect_timeout": "5", "target_session_attrs": "read-write"}
    assert config["CONN_MAX_AGE"] == 300 and config["CONN_HEALTH_CHECKS"] is True


def test_db_variables_read_from_files_make_the_database(monkeypatch, tmp_path):
    """deploy/components/cloudnative-pg: the names come from CloudNativePG's app Secret, the host from the ConfigMap."""
    for key, value in {"username": "app", "password": "pw", "dbname": "injector"}.items():
        (tmp_path / key).write_text(value + "\n")
    monkeypatch.setenv("DB_HOST", "volcano-injector-pg-pooler.gpustack.svc")
    monkeypatch.setenv("DB_NAME_FILE", str(tmp_path / "dbname"))
    monkeypatch.setenv("DB_USER_FILE", str(tmp_path / "username"))
    monkeypatch.setenv("DB_PASSWORD_FILE", str(tmp_path / "password"))
    config = database_from_env(tmp_path)
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"], config["PASSWORD"]) == (
        "volcano-injector-pg-pooler.gpustack.svc", "5432", "injector", "app", "pw")
    assert config["OPTIONS"] == {"connect_timeout": 2}


def test_the_direct_database_is_the_same_database_for_the_tests(monkeypatch):
    assert direct_database_from_env() is None
    monkeypatch.setenv("DATABASE_DIRECT_URL", "postgresql://app:pw@volcano-injector-pg-rw.gpustack:5432/injector")
    config = direct_database_from_env()
    assert config["HOST"] == "volcano-injector-pg-rw.gpustack" and config["NAME"] == "injector"
    assert config["TEST"] == {"MIRROR": "default"}
    assert config["CONN_MAX_AGE"] == 0


@pytest.mark.parametrize("value, mode", [(None, "session"), ("", "session"), ("Transaction", "transaction"),
                                         ("session", "session")])
def test_the_pool_mode_is_session_unless_told(monkeypatch, value, mode):
    if value is not None:
        monkeypatch.setenv("DB_POOL_MODE", value)
    assert pool_mode_from_env() == mode


def test_statement_pooling_is_refused_with_the_modes_that_work(monkeypatch):
    monkeypatch.setenv("DB_POOL_MODE", "statement")
    with pytest.raises(ImproperlyConfigured, match=r"DB_POOL_MODE='statement' is not supported: use session .* or "
                                                   r"transaction"):
        pool_mode_from_env()


def test_libpq_params_carry_the_host_list_and_libpq_options_but_not_djangos():
    config = postgres_url_parse("postgres://u:p@db-1:5432,db-2:5432/app?target_session_attrs=read-write")
    config["OPTIONS"].update({"connect_timeout": 2, "isolation_level": 1, "server_side_binding": True})
    assert libpq_params(config) == {"dbname": "app", "host": "db-1,db-2", "port": "5432,5432", "user": "u",
                                    "password": "p", "connect_timeout": 2, "target_session_attrs": "read-write"}


def test_reads_that_need_a_session_go_around_a_transaction_pooler_when_they_can(settings, monkeypatch):
    from injector_site.platform.database import session_database

    assert session_database() == "default"
    monkeypatch.setitem(settings.DATABASES, "direct", {**settings.DATABASES["default"], "TEST": {"MIRROR": "default"}})
    assert session_database() == "default", "a session pool (or none): the app's own connection is a session"
    settings.DB_POOL_MODE = "transaction"
    assert session_database() == "direct"
