"""REST API token authentication against stored digests (profiles.models.ApiToken), with expiry,
last-used time, and a brake on guessing: too many bad tokens from one address (and token prefix) are answered 429."""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import NoReturn

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled

from ..models import ApiToken
from ..services import api_token_digest

KEYWORD = "Token"
PREFIX_CHARS = 12  # ApiToken.prefix of an issued token (profiles.services.api_token_issue)
LEGACY_PREFIX_CHARS = 8  # ... of a token migrated from DRF's authtoken (migration 0004)
# last_used_at is written at most this often per token: not one UPDATE per API call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(BaseAuthentication):
    """`Authorization: Token <token>`: the token's SHA-256 must match a row that has not expired.

    Bad tokens are counted per client address and token prefix in the cache (per process: the counts of a
    replica's workers add up, which still bounds guessing far below anything that could find a 256-bit
    token); past INJECTOR_API_BAD_TOKENS_PER_MINUTE that pair gets 429 for the rest of the minute. The
    prefix is the token's public start (ApiToken.prefix) when it is an issued token's, so clients behind
    one address (a NAT, a proxy) do not lock out each other's valid tokens; every other token (a guess,
    whatever its start) counts towards one shared count for the address, so changing the start of each
    guess gains nothing.
    """

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        address = request.META.get("REMOTE_ADDR", "")
        try:
            token = parts[1].decode() if len(parts) == 2 else ""
        except UnicodeError:
            token = ""
        # The rows whose public prefix the token starts with (12 characters; 8 for tokens migrated from
        # DRF's authtoken): they decide the brake's count, then the one whose digest matches is the token's.
        candidates = list(ApiToken.objects.select_related("user").filter(
            prefix__in={token[:PREFIX_CHARS], token[:LEGACY_PREFIX_CHARS]})) if token else []
        brake = _Brake(address, candidates[0].prefix if candidates else "")
        brake.check()
        if len(parts) != 2:
            brake.refuse("Invalid token header: use Authorization: Token <token>.")
        if not token:
            brake.refuse("Invalid token.")
        digest = api_token_digest(token)
        row = next((row for row in candidates if hmac.compare_digest(row.digest, digest)), None)
        now = timezone.now()
        if row is None or not row.user.is_active:
            brake.refuse("Invalid token.")
        if row.expires_at <= now:
            brake.refuse(f"Token expired on {row.expires_at:%Y-%m-%d}: issue a new one (manage.py issue_token).")
        if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        return row.user, row

    def authenticate_header(self, request) -> str:
        return KEYWORD


class _Brake:
    """The count of bad tokens from one address with one issued token's prefix ("": any other token), this minute."""

    def __init__(self, address: str, prefix: str) -> None:
        self.key = f"bad-api-tokens:{address}:{prefix}:{int(timezone.now().timestamp() // 60)}"
        self.prefix = prefix

    def check(self) -> None:
        if cache.get(self.key, 0) >= settings.INJECTOR_API_BAD_TOKENS_PER_MINUTE:
            which = f"starting {self.prefix} " if self.prefix else ""
            raise Throttled(wait=60 - int(timezone.now().timestamp()) % 60,
                            detail=f"Too many invalid tokens {which}from this address.")

    def refuse(self, message: str) -> NoReturn:
        cache.add(self.key, 0, timeout=120)
        try:
            cache.incr(self.key)
        except ValueError:  # expired between add and incr
            cache.set(self.key, 1, timeout=120)
        raise AuthenticationFailed(message)


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes ApiTokenAuthentication (drf-spectacular finds it by target_class)."""

    target_class = "profiles.api.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <token>`, from manage.py issue_token"}
