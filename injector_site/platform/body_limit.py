"""A cap on every request body, whatever reads it (DRF parsers read the stream, bypassing Django's own)."""

from django.conf import settings
from django.http import JsonResponse


class BodySizeLimitMiddleware:
    """Refuse with 413 a request whose Content-Length is over DATA_UPLOAD_MAX_MEMORY_SIZE.

    Django checks DATA_UPLOAD_MAX_MEMORY_SIZE only when request.body or request.POST is read;
    DRF's parsers read the stream directly, so without this a REST endpoint would read any size.
    A chunked body (no Content-Length) is bounded by the parsers that read it (/mutate's, the API's JSON).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and length and length.isdigit() and int(length) > limit:
            return JsonResponse({"detail": f"request body is larger than {limit} bytes"}, status=413)
        return self.get_response(request)
