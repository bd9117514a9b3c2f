"""The AdmissionReview wire format: the patch the API server decodes is the patch the engine made."""

import base64
import json

import pytest

from mutations.engine.admission import encode_patch, review_response

PATCHES = [
    [{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"}],
    [{"op": "add", "path": "/metadata/annotations/volcano-injector.io~1note", "value": "模型 7B — ok"}],
    # Values orjson refuses, taken by the standard library instead: a lone surrogate, a huge integer.
    [{"op": "add", "path": "/metadata/labels/odd", "value": "\ud800"}],
    [{"op": "add", "path": "/spec/priority", "value": 2**70}],
]


@pytest.mark.parametrize("patch", PATCHES, ids=["ascii", "non-ascii", "lone-surrogate", "huge-int"])
def test_the_patch_is_base64_of_compact_json_that_decodes_to_the_same_operations(patch):
    response = review_response("uid-1", allowed=True, patch=patch)["response"]
    assert response["patchType"] == "JSONPatch"
    text = base64.b64decode(response["patch"])
    assert json.loads(text) == patch
    assert b", " not in text and b": " not in text


def test_no_patch_means_no_patch_type():
    response = review_response("uid-2", allowed=True, patch=[])["response"]
    assert "patch" not in response and "patchType" not in response


def test_a_patch_encoded_beforehand_is_sent_as_it_was_encoded():
    patch = PATCHES[0]
    encoded = review_response("uid-3", allowed=True, patch=patch, patch_base64=encode_patch(patch))["response"]
    assert encoded == review_response("uid-3", allowed=True, patch=patch)["response"]
