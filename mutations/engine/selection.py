"""Which GPU node pools a Pod can land on: its nodeSelector, required node affinity and tolerations, as the
scheduler's own predicates read them, against each pool's labels and taints (Catalog.node_pools). Pure.

A label that differs from node to node within a pool (the hostname) matches when some node's value does:
what is not known never keeps a Pod off a pool. The answer is remembered per selection: the replicas of a
Deployment select alike.
"""

from __future__ import annotations

from typing import Any

from .specs import Catalog, JsonObject, NodePoolSpec

MEMO_ENTRIES = 256


def pools_for_pod(*, spec: JsonObject, catalog: Catalog) -> tuple[NodePoolSpec, ...] | None:
    """The pools the Pod's nodeSelector, required node affinity and tolerations let it land on; None when
    nothing is to be checked (no inventory, or a Pod bound to a node by name)."""
    if not catalog.node_pools or spec.get("nodeName"):
        return None
    try:
        selector = spec.get("nodeSelector") or {}
        affinity = spec.get("affinity")
        affinity = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
                    or {}) if affinity else {}
        tolerations = spec.get("tolerations") or []
        # Most Pods select nothing or by nodeSelector alone: a key without repr() for them.
        key = (id(catalog.node_pools), tuple(selector.items()), repr(affinity) if affinity else "",
               repr(tolerations) if tolerations else "")
        if not isinstance(affinity, dict) or not isinstance(tolerations, list):
            return None
    except (AttributeError, TypeError):  # a shape the API server would refuse: nothing to check against
        return None
    memo = _MEMO.get(key)
    if memo is not None and memo[0] is catalog.node_pools:
        return memo[1]
    terms = selection_terms(affinity)
    selected = bool(selector) or terms is not None
    found = tuple(pool for pool in catalog.node_pools
                  if _selector_holds(pool, selector, selected) and _affinity_holds(pool, terms)
                  and all(_tolerated(taint, tolerations) for taint in pool.taints))
    remember(_MEMO, key, (catalog.node_pools, found))
    return found


_MEMO: dict[tuple[object, ...], tuple[tuple[NodePoolSpec, ...], tuple[NodePoolSpec, ...]]] = {}



def remember(memo: dict[Any, Any], key: tuple[object, ...], value: object) -> None:
    """Keep `value` under `key` in a bounded memo (cleared when full)."""
    if len(memo) >= MEMO_ENTRIES:
        memo.clear()
    memo[key] = value


def selection_terms(affinity: JsonObject) -> list[list[tuple[str, str, list[str]]]] | None:
    """The required node affinity's terms (any one must hold), each a list of (key, operator, values); None: none."""
    terms = affinity.get("nodeSelectorTerms") if isinstance(affinity, dict) else None
    if not isinstance(terms, list) or not terms:
        return None
    found = []
    for term in terms:
        expressions = term.get("matchExpressions") if isinstance(term, dict) else None
        found.append([(str(e.get("key")), str(e.get("operator")), [str(v) for v in e.get("values") or []])
                      for e in (expressions if isinstance(expressions, list) else []) if isinstance(e, dict)])
    return found


def _values(pool: NodePoolSpec, key: str) -> tuple[set[str], bool]:
    """The values the pool's nodes have for a label, and whether some node may lack it."""
    value = pool.label(key)
    if value is not None:
        return {value}, False
    for name, values in pool.varying_labels:
        if name == key:
            return set(values), True
    return set(), True


def _holds(pool: NodePoolSpec, key: str, operator: str, values: list[str]) -> bool:
    """Whether some node of the pool can meet one requirement (never denying on what is not known)."""
    found, may_lack = _values(pool, key)
    if operator == "In":
        return bool(found & set(values))
    if operator == "NotIn":
        return may_lack or bool(found - set(values))
    if operator == "Exists":
        return bool(found)
    if operator == "DoesNotExist":
        return may_lack
    if operator in ("Gt", "Lt") and values:
        try:
            bound = int(values[0])
            return any((int(v) > bound) if operator == "Gt" else (int(v) < bound) for v in found)
        except ValueError:
            return False
    return True  # an operator the API server would have refused


def _selector_holds(pool: NodePoolSpec, selector: JsonObject, selected: bool) -> bool:
    if pool.declared and not pool.labels:
        return not selected  # a pool declared without labels: only a Pod that selects no nodes may land there
    return all(_holds(pool, str(k), "In", [str(v)]) for k, v in selector.items())


def _affinity_holds(pool: NodePoolSpec, terms: list[list[tuple[str, str, list[str]]]] | None) -> bool:
    if terms is None:
        return True
    return any(all(_holds(pool, *requirement) for requirement in term) for term in terms)


def _tolerated(taint: tuple[str, str, str], tolerations: list[object]) -> bool:
    key, value, effect = taint
    for toleration in tolerations:
        if not isinstance(toleration, dict):
            continue
        if toleration.get("effect") and toleration.get("effect") != effect:
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == key:
                return True
        elif toleration.get("key") == key and (toleration.get("value") or "") == value:
            return True
    return False
