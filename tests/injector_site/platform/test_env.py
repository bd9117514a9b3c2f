"""injector_site/platform/env.py: typed values from the environment, NAME_FILE secrets, errors naming the variable."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from injector_site.platform.env import env, env_bool, env_float, env_int, env_list

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_sample_variables(monkeypatch):
    for name in ("SAMPLE", "SAMPLE_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_env_reads_the_variable_or_returns_the_default(monkeypatch):
    assert env("SAMPLE") is None
    assert env("SAMPLE", "fallback") == "fallback"
    monkeypatch.setenv("SAMPLE", "value")
    assert env("SAMPLE", "fallback") == "value"


def test_env_reads_a_secret_from_the_file_named_by_name_file(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-the-secret\n")
    monkeypatch.setenv("SAMPLE", "from-the-environment")
    monkeypatch.setenv("SAMPLE_FILE", str(secret))
    assert env("SAMPLE") == "from-the-secret"


def test_an_unreadable_name_file_is_an_error_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SAMPLE_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match=r"^SAMPLE_FILE='.*missing' cannot be read"):
        env("SAMPLE")


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("true", True), ("Yes", True), ("ON", True), (" true ", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_env_bool_accepts_the_usual_words(monkeypatch, value, expected):
    monkeypatch.setenv("SAMPLE", value)
    assert env_bool("SAMPLE") is expected


@pytest.mark.parametrize("value", [None, "", "  "])
def test_typed_readers_return_the_default_for_an_unset_or_blank_variable(monkeypatch, value):
    if value is not None:
        monkeypatch.setenv("SAMPLE", value)
    assert env_bool("SAMPLE", True) is True
    assert env_int("SAMPLE", 7, minimum=1) == 7
    assert env_float("SAMPLE", 0.25, minimum=0) == 0.25
    assert env_list("SAMPLE", "a,b") == (["a", "b"] if value is None else [])


def test_env_int_and_env_float_read_numbers(monkeypatch):
    monkeypatch.setenv("SAMPLE", " 12 ")
    assert env_int("SAMPLE", 1, minimum=1) == 12
    assert env_float("SAMPLE", 1.0) == 12.0
    monkeypatch.setenv("SAMPLE", "0.25")
    assert env_float("SAMPLE", 1.0, minimum=0) == 0.25


@pytest.mark.parametrize("read, value, message", [
    (lambda: env_bool("SAMPLE"), "maybe", "SAMPLE='maybe' is not a boolean: use true or false"),
    (lambda: env_int("SAMPLE", 1), "two", "SAMPLE='two' is not an integer"),
    (lambda: env_int("SAMPLE", 1), "1.5", "SAMPLE='1.5' is not an integer"),
    (lambda: env_int("SAMPLE", 1, minimum=1), "0", "SAMPLE='0' must be at least 1"),
    (lambda: env_float("SAMPLE", 1.0), "soon", "SAMPLE='soon' is not a number"),
    (lambda: env_float("SAMPLE", 1.0, minimum=0), "-0.5", "SAMPLE='-0.5' must not be negative"),
    (lambda: env_float("SAMPLE", 1.0, minimum=0.5), "0.1", "SAMPLE='0.1' must be at least 0.5"),
])
def test_a_refused_value_is_an_error_naming_the_variable_and_what_it_accepts(monkeypatch, read, value, message):
    monkeypatch.setenv("SAMPLE", value)
    with pytest.raises(ImproperlyConfigured) as caught:
        read()
    assert str(caught.value) == message


def test_a_value_from_name_file_is_checked_like_one_from_the_environment(monkeypatch, tmp_path):
    secret = tmp_path / "workers"
    secret.write_text("zero\n")
    monkeypatch.setenv("SAMPLE_FILE", str(secret))
    with pytest.raises(ImproperlyConfigured, match=r"^SAMPLE='zero' is not an integer$"):
        env_int("SAMPLE", 1)


def test_env_list_splits_on_commas_and_drops_blank_items(monkeypatch):
    monkeypatch.setenv("SAMPLE", " a , ,b,")
    assert env_list("SAMPLE") == ["a", "b"]


def test_importing_it_needs_no_django_settings():
    # gunicorn's master reads its settings with it before any app, so no DJANGO_SETTINGS_MODULE.
    script = "import injector_site.platform.env, django.conf as c; assert not c.settings.configured; print('ok')"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(REPO)})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
