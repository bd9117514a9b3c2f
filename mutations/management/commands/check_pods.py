"""manage.py check_pods deploy/*.yaml --configuration volcano-config.yaml: what the webhook would do with every Pod
the manifests create, decided by the engine alone (no database, no cluster), for CI before a merge.

Exit status: 0 when every Pod would be admitted, 1 when any would be denied, 2 when a file or the configuration
cannot be read (the message names the file and the line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError

from mutations.engine import Catalog, JsonObject
from mutations.engine.configuration import ConfigurationError, catalog_from_document
from mutations.engine.groups import group_leader_of, group_leader_wanted
from mutations.engine.specs import GroupLeader
from mutations.engine.workloads import RUNTIME_KINDS, RenderedPod, manifest_pods
from mutations.webhook.decide import admission_answer, pod_preview

EXIT_DENIED = 1
EXIT_UNREADABLE = 2


@dataclass(frozen=True)
class _Document:
    path: str
    line: int
    body: Any


class Command(BaseCommand):
    help = ("Decide every Pod and Pod template in manifest files as the webhook would, from an exported "
            "configuration (manage.py export_configuration); needs no database or cluster.")
    # No system checks: they may read the database, and this command must run where there is none.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE", help="Manifest files (YAML or JSON, multi-document).")
        parser.add_argument("--configuration", "-c", required=True,
                            help="The configuration written by manage.py export_configuration.")
        parser.add_argument("--namespace", "-n", default=None,
                            help="Namespace of objects that name none (default: default).")
        parser.add_argument("--output", "-o", choices=("text", "json"), default="text", help="Output format.")

    def handle(self, *args, files: list[str], configuration: str, namespace: str | None, output: str, **options):
        catalog = _catalog_read(configuration)
        not_rendered: list[JsonObject] = []
        read = {path: _documents_read(path) for path in files}  # every file first: exit 2 before any verdict
        # A ServingRuntime may sit in another file than the InferenceService that uses it.
        runtimes = [d.body for documents in read.values() for d in documents if d.body.get("kind") in RUNTIME_KINDS]
        rendered: list[tuple[str, int, RenderedPod]] = []
        for path, documents in read.items():
            for document in documents:
                try:
                    pods, missing = manifest_pods([document.body, *runtimes], namespace=namespace)
                except (AttributeError, TypeError, ValueError) as exc:  # a part of the object is not what its kind has
                    raise CommandError(f"{path}:{document.line}: {document.body.get('kind')} cannot be read: {exc}",
                                       returncode=EXIT_UNREADABLE) from None
                rendered += [(path, document.line, pod) for pod in pods]
                not_rendered += [{"file": path, "line": document.line, "source": m.source, "reason": m.reason}
                                 for m in missing]
        checked = _decided(rendered, catalog)
        denied = sum(1 for item in checked if not item["allowed"])
        if output == "json":
            self.stdout.write(json.dumps({"configuration_version": catalog.version, "pods": checked,
                                          "not_rendered": not_rendered,
                                          "summary": {"pods": len(checked), "admitted": len(checked) - denied,
                                                      "denied": denied}}, indent=2))
        else:
            for item in checked:
                self._print(item)
            for item in not_rendered:
                self.stdout.write(f"{item['file']}:{item['line']}: {item['source']}: not checked: {item['reason']}")
            self.stdout.write(f"{len(checked)} Pods checked against configuration version {catalog.version}: "
                              f"{len(checked) - denied} admitted, {denied} denied")
        if denied:
            raise CommandError(f"{denied} of {len(checked)} Pods would be denied", returncode=EXIT_DENIED)

    def _print(self, item: JsonObject) -> None:
        head = f"{item['file']}:{item['line']}: {item['source']} in {item['namespace']}: "
        if not item["allowed"]:
            self.stdout.write(head + f"DENIED: {item['reason']}")
            for fix in item["fixes"]:
                self.stdout.write(f"  fix: {fix}")
            return
        self.stdout.write(head + f"{item['decision']}: {item['reason']}")
        if item["preset"]:
            self.stdout.write(f"  preset {item['preset']} (chosen by {item['source_of_preset'] or '-'}), "
                              f"policy {item['policy']}")
        for grant in item["grants"]:
            cores = f", {grant['vgpu_cores_percent']}% of each card's compute" \
                if grant["vgpu_cores_percent"] is not None else ""
            self.stdout.write(f"  grant {grant['container']}: {grant['vgpu_number']} vGPU x "
                              f"{grant['vgpu_memory_mib']} MiB{cores}")
        for warning in item["warnings"]:
            self.stdout.write(f"  warning: {warning}")


def _decided(rendered: list[tuple[str, int, RenderedPod]], catalog: Catalog) -> list[JsonObject]:
    """Every Pod decided, in the files' order. A serving group's worker that runs no server takes its leader's
    grant, as /mutate gave it when it admitted the leader (mutations/webhook/groups.py): here the leader is the
    Pod of that name among the files, as admitted; so leaders are decided first."""
    leaders = {index: group_leader_wanted(item[2].pod) for index, item in enumerate(rendered)}
    admitted: dict[tuple[str, str], JsonObject] = {}
    found: dict[int, JsonObject] = {}
    for index in sorted(leaders, key=lambda i: leaders[i] is not None):
        path, line, pod = rendered[index]
        leader = None
        if leaders[index] is not None:
            name = str(leaders[index])
            leader_pod = admitted.get((pod.namespace, name))
            leader = (group_leader_of(name, leader_pod) if leader_pod is not None else
                      GroupLeader(name, None, "the leader Pod is not among the files checked"))
        found[index], admitted_pod = _check(pod, catalog, path=path, line=line, group_leader=leader)
        pod_name = (admitted_pod.get("metadata") or {}).get("name")
        if pod_name:
            admitted[(pod.namespace, str(pod_name))] = admitted_pod
    return [found[index] for index in range(len(rendered))]


def _check(rendered: RenderedPod, catalog: Catalog, *, path: str, line: int,
           group_leader: GroupLeader | None = None) -> tuple[JsonObject, JsonObject]:
    """The verdict on one Pod, and the Pod as it would be admitted (as written when denied)."""
    preview = pod_preview(pod=rendered.pod, namespace=rendered.namespace, catalog=catalog, group_leader=group_leader)
    answer = admission_answer(preview)
    result = preview.result
    explanation = result.explanation or {}
    metadata = rendered.pod.get("metadata") or {}
    verdict = {
        "file": path,
        "line": line,
        "source": rendered.source,
        "namespace": rendered.namespace,
        "pod": metadata.get("name") or metadata.get("generateName") or "",
        "decision": answer.decision.value,
        "allowed": answer.allowed,
        "reason": answer.reason,
        "field": answer.field,
        "policy": result.policy,
        "preset": result.preset,
        "source_of_preset": result.source,
        "grants": [grant.as_dict() for grant in result.grants] if answer.allowed else [],
        "warnings": list(answer.warnings),
        "patch": answer.patch,  # the JSON patch /mutate would send (none for audit-only)
        "fixes": _fixes(explanation) if not answer.allowed else [],
        "explanation": result.explanation,
    }
    return verdict, (result.pod if answer.allowed and answer.patch else rendered.pod)


def _fixes(explanation: JsonObject) -> list[str]:
    fixes: list[str] = []
    for violation in explanation.get("violations") or []:
        fixes += [fix for fix in violation.get("fixes") or [] if fix not in fixes]
    return fixes


def _catalog_read(path: str) -> Catalog:
    documents = _documents_read(path)
    if len(documents) != 1:
        raise CommandError(f"{path}: a configuration file holds one YAML document, not {len(documents)}",
                           returncode=EXIT_UNREADABLE)
    try:
        return catalog_from_document(documents[0].body)
    except ConfigurationError as exc:
        raise CommandError(f"{path}: {exc}", returncode=EXIT_UNREADABLE) from exc


def _documents_read(path: str) -> list[_Document]:
    """The file's documents (a `kind: List` expanded) with the line each starts on; CommandError (exit 2) naming
    the file and the line when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CommandError(f"{path}: cannot read the file: {reason}", returncode=EXIT_UNREADABLE) from exc
    loader = yaml.SafeLoader(text)
    documents: list[_Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            line = node.start_mark.line + 1
            body = loader.construct_document(node)
            if body is None:
                continue
            if not isinstance(body, dict):
                raise CommandError(f"{path}:{line}: a Kubernetes object (a mapping) is expected, not "
                                   f"{type(body).__name__}", returncode=EXIT_UNREADABLE)
            if str(body.get("kind") or "").endswith("List") and isinstance(body.get("items"), list):
                documents += [_Document(path, line, item) for item in body.get("items") or []
                              if isinstance(item, dict)]
            else:
                documents.append(_Document(path, line, body))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or str(exc)
        raise CommandError(f"{where}: not valid YAML: {problem}", returncode=EXIT_UNREADABLE) from None
    finally:
        loader.dispose()
    return documents
