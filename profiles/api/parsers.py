"""A YAML request body, so that `curl --data-binary @pod.yaml` works for previews."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from ..services import PodDocumentError, pod_document_parse


class PodYAMLParser(BaseParser):
    """A Pod manifest in YAML (or JSON) as the whole body; the namespace comes from ?namespace=."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return {"pod": pod_document_parse(text=stream.read())}
        except PodDocumentError as exc:
            raise ParseError(str(exc)) from exc


class PodTextYAMLParser(PodYAMLParser):
    media_type = "text/yaml"
