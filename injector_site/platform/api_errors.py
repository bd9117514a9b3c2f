"""The REST framework's exception handler, plus the failures of malformed input it does not know."""

from django.db import DataError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def api_exception_handler(exc, context):
    """DRF's answer; a body nested too deeply to parse, or data PostgreSQL refuses, is a 400 that says so."""
    if isinstance(exc, RecursionError):
        return Response(
            {"detail": "request body is nested too deeply (JSON or YAML deeper than this server parses)"},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, DataError):
        # A value PostgreSQL refuses as data (e.g. a NUL character in a lookup): the input is at fault.
        return Response({"detail": f"request data cannot be stored: {exc}".strip()},
                        status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)
