"""The REST API's JSON parser: DRF's, refusing what PostgreSQL cannot store or Python cannot parse."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """JSON without NUL characters (PostgreSQL text cannot hold them) and not nested too deeply."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply") from exc
        if _has_nul(data):
            raise ParseError("JSON parse error - strings must not contain NUL characters (\\u0000)")
        return data


def _has_nul(value, depth: int = 0) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v, depth + 1) for v in value)
    return False
