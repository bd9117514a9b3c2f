"""manage.py issue_token alice: issue a REST API token for a user and print it, once."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from profiles.services import api_token_issue


class Command(BaseCommand):
    help = ("Issue a REST API token for a user (Authorization: Token <token>) and print it once: only its "
            "digest is stored, so keep it now.")

    def add_arguments(self, parser):
        parser.add_argument("username", help="An existing user; the token acts with that user's permissions.")
        parser.add_argument("--rotate", action="store_true", help="Revoke the user's other tokens.")
        parser.add_argument("--days", type=int, default=None,
                            help="How long the token is valid (default: INJECTOR_API_TOKEN_DAYS, 90).")

    def handle(self, *args, username: str, rotate: bool, days: int | None, **options):
        if days is not None and days < 1:
            raise CommandError("--days must be at least 1")
        try:
            token, row = api_token_issue(username=username, rotate=rotate, days=days)
        except get_user_model().DoesNotExist as exc:
            raise CommandError(
                f"no user {username!r}: create one first (manage.py createsuperuser, or in the admin)"
            ) from exc
        revoked = " (the user's other tokens were revoked)" if rotate else ""
        self.stderr.write(f"new token for {username}, valid until {row.expires_at:%Y-%m-%d %H:%M} UTC{revoked}; "
                          "it is shown only now")
        self.stdout.write(token)
