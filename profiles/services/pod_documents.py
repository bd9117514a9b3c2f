"""Reading one Pod from the YAML or JSON text an operator pastes or uploads, with bounds on what it may cost."""

from __future__ import annotations

import json
import re

import yaml

from mutations.engine import JsonObject


class PodDocumentError(ValueError):
    """Text that is not one Pod in YAML or JSON."""


# A Pod manifest is a few KiB. YAML aliases (*name) repeat a node without repeating its text: a 531-byte
# document of nested aliases expanded to gigabytes ("billion laughs"). So the text, its aliases and the
# expanded document are all bounded: at most MAX_YAML_ALIASES aliases expand a document by at most
# 2**5, and the expanded JSON is checked too.
MAX_POD_DOCUMENT_CHARS = 512 * 1024
MAX_YAML_ALIASES = 10
MAX_POD_JSON_BYTES = 2 * 1024 * 1024
# Flow collections ([...], {...}) open at once: a Pod nests a few levels. PyYAML's scanner is quadratic in this
# depth (about 0.7 s of CPU for 5,000 levels before it recurses out), so deeper text is refused unparsed.
# Brackets inside quoted strings count too: a Pod would need this many unclosed ones to be refused wrongly.
MAX_POD_FLOW_DEPTH = 100
_FLOW_BRACKETS = re.compile(r"[\[\]{}]")


class _BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader (plain data only), refusing more than MAX_YAML_ALIASES aliases."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise PodDocumentError(f"the Pod uses more than {MAX_YAML_ALIASES} YAML aliases (*name); "
                                       "write the repeated parts out")
        return super().compose_node(parent, index)


def pod_document_parse(*, text: str | bytes) -> JsonObject:
    """One Pod from YAML or JSON text (a manifest as `kubectl apply -f` takes it); raise PodDocumentError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PodDocumentError(f"the Pod is not UTF-8 text: {exc}") from exc
    if len(text) > MAX_POD_DOCUMENT_CHARS:
        raise PodDocumentError(f"the Pod is {len(text)} characters long; accepted: at most {MAX_POD_DOCUMENT_CHARS}")
    if _flow_depth_over(text, MAX_POD_FLOW_DEPTH):
        raise PodDocumentError("the Pod is nested too deeply to be a Pod")
    try:
        documents = [d for d in yaml.load_all(text, Loader=_BoundedSafeLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise PodDocumentError(f"the Pod is not valid YAML or JSON: {exc}") from exc
    except RecursionError:
        raise PodDocumentError("the Pod is nested too deeply to be a Pod") from None
    if len(documents) != 1:
        raise PodDocumentError(f"expected one Pod, found {len(documents)} YAML documents")
    return pod_document_check(document=documents[0])


def _flow_depth_over(text: str, limit: int) -> bool:
    depth = 0
    for bracket in _FLOW_BRACKETS.finditer(text):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(0, depth - 1)
    return False


def pod_document_check(*, document: object) -> JsonObject:
    """The document if it is a Pod object (kind Pod or no kind); raise PodDocumentError saying what is wrong."""
    if not isinstance(document, dict):
        raise PodDocumentError(f"expected a Pod object, got {type(document).__name__}")
    kind = document.get("kind", "Pod")
    if kind != "Pod":
        hint = " (paste its spec.template as a Pod, with kind: Pod)" if isinstance(
            (document.get("spec") or {}).get("template") if isinstance(document.get("spec"), dict) else None, dict
        ) else ""
        raise PodDocumentError(f"expected kind: Pod, got kind: {kind}{hint}")
    if not isinstance(document.get("spec"), dict):
        raise PodDocumentError("the Pod has no spec")
    # YAML allows keys and values JSON has no form for (dates, non-string keys, .inf and .nan): the API
    # server would not.
    try:
        text = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PodDocumentError(f"the Pod holds a value JSON cannot carry (JSON has no infinity or NaN, and "
                               f"only string keys): {exc}") from exc
    if len(text) > MAX_POD_JSON_BYTES:
        raise PodDocumentError(f"the Pod is {len(text)} bytes as JSON; accepted: at most {MAX_POD_JSON_BYTES}")
    copied: JsonObject = json.loads(text)
    return copied
