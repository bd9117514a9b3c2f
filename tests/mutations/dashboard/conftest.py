"""The dashboard's tests log in as an operator: staff with the audit view permission."""

import pytest
from django.contrib.auth.models import Permission


@pytest.fixture
def staff_client(client, django_user_model):
    """Logged in as staff with the audit view permission (mutations.view_admissionaudit)."""
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_admissionaudit"))
    client.force_login(user)
    return client


@pytest.fixture
def count_in_any_time(monkeypatch):
    """The history count's time budget out of the way, for tests of what it counts: a loaded test machine can
    spend the production budget (selectors.COUNT_BUDGET_MS) on the savepoints alone."""
    monkeypatch.setattr("mutations.audit.selectors.COUNT_BUDGET_MS", 60_000)
