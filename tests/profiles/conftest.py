"""Users with different rights, and API clients logged in as them."""

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient


def _user(username: str, *, perms: tuple[str, ...] = (), staff: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, is_staff=staff)
    if perms:
        codenames = [p.split(".", 1)[1] for p in perms]
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="profiles",
                                                             codename__in=codenames))
    return user


ALL_PROFILE_PERMS = tuple(
    f"profiles.{action}_{model}"
    for model in ("preset", "gpumodel", "namespacepolicy", "languagemodel", "oversubscriptionpolicy")
    for action in ("view", "add", "change", "delete")
) + ("profiles.view_objectchange",)


@pytest.fixture
def reader(db) -> User:
    """Logged in, no model permissions."""
    return _user("reader")


@pytest.fixture
def operator(db) -> User:
    """Staff with every profiles permission (what an operator group grants)."""
    return _user("operator", perms=ALL_PROFILE_PERMS, staff=True)


@pytest.fixture
def anonymous_api() -> APIClient:
    return APIClient()


@pytest.fixture
def reader_api(reader) -> APIClient:
    client = APIClient()
    client.force_authenticate(reader)
    return client


@pytest.fixture
def change_viewer_api(db) -> APIClient:
    """Logged in with only profiles.view_objectchange (reads the change log, changes nothing)."""
    client = APIClient()
    client.force_authenticate(_user("change-viewer", perms=("profiles.view_objectchange",)))
    return client


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


@pytest.fixture
def staff_client(client, operator):
    """The Django test client logged in to the admin as a staff operator."""
    client.force_login(operator)
    return client


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Test users' passwords need no brute-force resistance; PBKDF2 would dominate these tests' time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
