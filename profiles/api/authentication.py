"""REST API token authentication against stored digests (profiles.models.ApiToken), with expiry,
last-used time, and a brake on guessing: too many bad tokens from one address are answered 429."""

from __future__ import annotations

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
# last_used_at is written at most this often per token: not one UPDATE per API call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(BaseAuthentication):
    """`Authorization: Token <token>`: the token's SHA-256 must match a row that has not expired.

    Bad tokens are counted per client address in the cache (per process: the counts of a replica's
    workers add up, which still bounds guessing far below anything that could find a 256-bit token);
    past INJECTOR_API_BAD_TOKENS_PER_MINUTE the address gets 429 for the rest of the minute.
    """

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        address = request.META.get("REMOTE_ADDR", "")
        self._check_brake(address)
        if len(parts) != 2:
            self._refuse(address, "Invalid token header: use Authorization: Token <token>.")
        try:
            token = parts[1].decode()
        except UnicodeError:
            self._refuse(address, "Invalid token.")
        row = ApiToken.objects.select_related("user").filter(digest=api_token_digest(token)).first()
        now = timezone.now()
        if row is None or not row.user.is_active:
            self._refuse(address, "Invalid token.")
        if row.expires_at <= now:
            self._refuse(address, f"Token expired on {row.expires_at:%Y-%m-%d}: issue a new one "
                                  "(manage.py issue_token).")
        if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        return row.user, row

    def authenticate_header(self, request) -> str:
        return KEYWORD

    @staticmethod
    def _key(address: str) -> str:
        return f"bad-api-tokens:{address}:{int(timezone.now().timestamp() // 60)}"

    def _check_brake(self, address: str) -> None:
        if cache.get(self._key(address), 0) >= settings.INJECTOR_API_BAD_TOKENS_PER_MINUTE:
            raise Throttled(wait=60 - int(timezone.now().timestamp()) % 60,
                            detail="Too many invalid tokens from this address.")

    def _refuse(self, address: str, message: str) -> NoReturn:
        key = self._key(address)
        cache.add(key, 0, timeout=120)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=120)
        raise AuthenticationFailed(message)


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes ApiTokenAuthentication (drf-spectacular finds it by target_class)."""

    target_class = "profiles.api.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <token>`, from manage.py issue_token"}
