"""Issuing REST API tokens (only their digests are stored)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from ..models import ApiToken

TOKEN_PREFIX = "vi_"  # noqa: S105 - a public marker at the start of every token, not a secret


def api_token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256 (a token is 256 random bits; a slow hash would add nothing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_issue(*, username: str, rotate: bool = False, days: int | None = None) -> tuple[str, ApiToken]:
    """A new REST API token for a user, valid for `days` (INJECTOR_API_TOKEN_DAYS by default); with rotate,
    the user's other tokens are revoked. Returns (the token, its row): the token is never stored, only its digest."""
    user = get_user_model().objects.get(**{get_user_model().USERNAME_FIELD: username})
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    days = settings.INJECTOR_API_TOKEN_DAYS if days is None else days
    with transaction.atomic():
        if rotate:
            ApiToken.objects.filter(user=user).delete()
        row = ApiToken.objects.create(user=user, digest=api_token_digest(token), prefix=token[:12],
                                      expires_at=timezone.now() + timedelta(days=days))
    return token, row
