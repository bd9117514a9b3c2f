#!/usr/bin/env python3
"""Extract the OpenAPI schemas of chosen custom resources from released CRD manifests, for tests/deploy.

    .venv/bin/python scripts/crd-schemas.py tests/deploy/crds --kinds Cluster,Pooler,ScheduledBackup \
        cnpg-1.30.0.yaml

Writes <group>_<version>_<kind>.json per served version of each chosen kind: the
`openAPIV3Schema` with what validation does not read (descriptions, examples) removed. Where the
manifests come from, and their versions: tests/deploy/crds/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

DROPPED_KEYS = {"description", "example"}


def stripped(node: object, *, under_properties: bool = False) -> object:
    """The schema without descriptions and examples (a property that is itself named so is kept)."""
    if isinstance(node, dict):
        return {key: stripped(value, under_properties=key == "properties" and not under_properties)
                for key, value in node.items() if under_properties or key not in DROPPED_KEYS}
    if isinstance(node, list):
        return [stripped(item) for item in node]
    return node


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory for the JSON schemas")
    parser.add_argument("--kinds", required=True, help="comma-separated kinds to keep, e.g. Cluster,Pooler")
    parser.add_argument("manifests", nargs="+", type=Path, help="release manifests or CRD files (YAML)")
    args = parser.parse_args()
    wanted = {kind.strip() for kind in args.kinds.split(",") if kind.strip()}
    found = set()
    args.out.mkdir(parents=True, exist_ok=True)
    for manifest in args.manifests:
        for document in yaml.safe_load_all(manifest.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            kind = spec["names"]["kind"]
            if kind not in wanted:
                continue
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                schema = stripped(version["schema"]["openAPIV3Schema"])
                target = args.out / f"{spec['group']}_{version['name']}_{kind.lower()}.json"
                target.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
                print(f"{target} ({target.stat().st_size} bytes) from {manifest}")
                found.add(kind)
    if wanted - found:
        print(f"not found: {', '.join(sorted(wanted - found))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
