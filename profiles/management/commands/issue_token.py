"""manage.py issue_token alice: print the REST API token of a user (creating it if needed)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from profiles.services import api_token_issue


class Command(BaseCommand):
    help = "Print a user's REST API token for scripts (Authorization: Token <key>), creating it if needed."

    def add_arguments(self, parser):
        parser.add_argument("username", help="An existing user; the token acts with that user's permissions.")
        parser.add_argument("--rotate", action="store_true", help="Replace an existing token with a new one.")

    def handle(self, *args, username: str, rotate: bool, **options):
        try:
            token, created = api_token_issue(username=username, rotate=rotate)
        except get_user_model().DoesNotExist as exc:
            raise CommandError(
                f"no user {username!r}: create one first (manage.py createsuperuser, or in the admin)"
            ) from exc
        if created:
            self.stderr.write(f"{'new token' if not rotate else 'rotated token'} for {username}")
        self.stdout.write(token.key)
