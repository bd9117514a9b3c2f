"""A Content-Security-Policy on every response: only this origin's own scripts, styles and images.

The pages have no inline script or style (the dashboard's bars and charts are SVG with attributes,
Swagger UI's start script is a file of its own: SpectacularSwaggerSplitView), so an injected
<script> or style does nothing even if some text ever escaped unescaped. Swagger UI's own bundle
sets inline styles as it renders, so /api/docs/ alone also allows inline styles (never scripts).
"""

from __future__ import annotations

POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
          "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# Paths whose pages need inline styles, and the policy they get.
RELAXED = {"/api/docs/": POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")}


class ContentSecurityPolicyMiddleware:
    """Add POLICY (or the path's RELAXED one) unless a view set its own."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = RELAXED.get(request.path, POLICY)
        return response
