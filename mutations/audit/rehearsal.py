"""Audit-only as a rehearsal: what enforce would have done in a namespace, read from the audit rows.

An audit-only row says "would deny: ..." or "would apply: ..." in its reason (the engine writes it so).
On PostgreSQL the counts come from the hourly rollup (decisions and MiB per namespace, whole hours) and
the partial index audit_would_deny (the would-deny rows alone); the rules and the policies from the newest
rows, a bounded number. No query reads every row of the window: the page costs the same at any table size
(docs/audit-rollup.md, "The rehearsal page").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, Sum
from django.utils import timezone

from ..engine import Decision
from ..engine.denial import RULES
from ..models import WOULD_DENY_PREFIX, WOULD_DENY_ROWS, AdmissionAudit
from .rollup import HOURLY

REHEARSAL_DAYS = 7
# Would-deny rows read to group them by the rule that would deny (the newest first): enough to rank the rules
# of any namespace, bounded for the database and the page. The page says when it read fewer than there are.
RULE_ROWS_READ = 500
# The namespace's newest admissions read for the policies they were decided under (the page says "of its
# newest N" when the window holds more): a DISTINCT over the whole window read every row of it.
POLICY_ROWS_READ = 1_000
# Pods shown as examples under each rule.
RULE_EXAMPLES = 3
# The overview counts rehearsed denials up to this many, then says "more than".
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Rehearsal:
    """What enforce would have done in one namespace since a whole hour, and what it did where enforced."""

    namespace: str
    since: datetime
    would_deny: int
    would_apply: int
    would_grant_mib: int
    denied: int
    mutated: int
    rules: list[RuleDenials]
    rules_read: int
    policies: list[str]
    # The newest admissions the policies were read from; policies_cut: the window holds more than those.
    policies_read: int = 0
    policies_cut: bool = False


@dataclass
class RuleDenials:
    """One rule enforce would deny Pods for: how many of the rows read break it, and the newest examples."""

    rule: str
    rule_text: str
    policy: str | None
    pods: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


def rehearsal_since(*, days: int = REHEARSAL_DAYS, now: datetime | None = None) -> datetime:
    """The start of the rehearsal's window: the whole UTC hour `days` days ago (the hourly rollup's bucket)."""
    moment = ((now or timezone.now()) - timedelta(days=days)).astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def namespace_rehearsal(*, namespace: str, days: int = REHEARSAL_DAYS, now: datetime | None = None,
                        examples: int = RULE_EXAMPLES) -> Rehearsal:
    """What enforce would do in a namespace: its admissions from `rehearsal_since` on (every row stamped then
    or later), counted by what enforce would do, with the rules it would deny for (`examples` Pods each) and the
    policies seen."""
    since = rehearsal_since(days=days, now=now)
    totals = _rolled_totals(namespace=namespace, since=since) if connection.vendor == "postgresql" \
        else rehearsal_totals(namespace=namespace, since=since)
    rows = AdmissionAudit.objects.filter(namespace=namespace, created_at__gte=since)
    # What enforce would refuse, by the rule that would deny (each row's explanation lists every rule it breaks).
    denials = list(rows.filter(WOULD_DENY_ROWS).order_by("-created_at", "-id")
                   .only("id", "created_at", "pod_name", "generate_name", "field", "explanation")[:RULE_ROWS_READ])
    newest = list(rows.order_by("-created_at", "-id").values_list("policy_name", flat=True)[:POLICY_ROWS_READ + 1])
    cut, newest = len(newest) > POLICY_ROWS_READ, newest[:POLICY_ROWS_READ]
    return Rehearsal(namespace=namespace, since=since, rules=rules_of(denials, examples=examples),
                     rules_read=len(denials),
                     policies=sorted({p for p in newest if p}), policies_read=len(newest), policies_cut=cut, **totals)


def rehearsal_totals(*, namespace: str, since: datetime) -> dict[str, int]:
    """The rehearsal's counts by counting the namespace's rows from `since` on (SQLite, and the tests' reference):
    would_deny, would_apply, would_grant_mib (MiB of the would-apply rows), denied, mutated."""
    audit_only = Q(decision=Decision.AUDIT_ONLY.value)
    totals = AdmissionAudit.objects.filter(namespace=namespace, created_at__gte=since).aggregate(
        would_deny=Count("id", filter=WOULD_DENY_ROWS),
        would_apply=Count("id", filter=audit_only & ~Q(reason__startswith=WOULD_DENY_PREFIX)),
        would_grant_mib=Sum("vgpu_memory_mib", filter=audit_only & ~Q(reason__startswith=WOULD_DENY_PREFIX)),
        denied=Count("id", filter=Q(decision=Decision.DENIED.value)),
        mutated=Count("id", filter=Q(decision=Decision.MUTATED.value)),
    )
    return {name: int(value or 0) for name, value in totals.items()}


# One statement, so one snapshot: the hourly rollup's admissions and MiB per decision of the namespace from a
# whole hour on, and the would-deny rows' count and MiB through the partial index audit_would_deny (its
# predicate written out as the index has it, so the planner matches it). Would apply = audit-only minus would
# deny, for the count and the MiB alike: a would-deny row's MiB is subtracted as read, not assumed 0.
_ROLLED_TOTALS = f"""
SELECT decision, sum(admissions)::bigint, coalesce(sum(vgpu_memory_mib), 0)::bigint
FROM "{HOURLY}" WHERE hour >= %(since)s AND namespace = %(namespace)s AND decision = ANY(%(decisions)s)
GROUP BY decision
UNION ALL
SELECT NULL, count(*), coalesce(sum(vgpu_memory_mib), 0)::bigint FROM mutations_admissionaudit
WHERE decision = '{Decision.AUDIT_ONLY.value}' AND reason LIKE '{WOULD_DENY_PREFIX}%%'
  AND namespace = %(namespace)s AND created_at >= %(since)s
"""


def _rolled_totals(*, namespace: str, since: datetime) -> dict[str, int]:
    """rehearsal_totals from the hourly rollup and the would-deny rows (PostgreSQL); `since` a whole hour."""
    decisions = [Decision.AUDIT_ONLY.value, Decision.DENIED.value, Decision.MUTATED.value]
    with connection.cursor() as cursor:
        cursor.execute(_ROLLED_TOTALS, {"since": since, "namespace": namespace, "decisions": decisions})
        found = {decision: (int(n), int(mib)) for decision, n, mib in cursor.fetchall()}
    audit_only, would_deny = found.get(Decision.AUDIT_ONLY.value, (0, 0)), found[None]
    return {"would_deny": would_deny[0], "would_apply": audit_only[0] - would_deny[0],
            "would_grant_mib": audit_only[1] - would_deny[1],
            "denied": found.get(Decision.DENIED.value, (0, 0))[0],
            "mutated": found.get(Decision.MUTATED.value, (0, 0))[0]}


# Rows written before denials were explained name only the field at fault: grouped under it.
UNRECORDED_RULE = "(not recorded)"


def rules_of(rows: list[AdmissionAudit], *, examples: int = RULE_EXAMPLES) -> list[RuleDenials]:
    """Would-deny rows grouped by each rule they break (a Pod breaking two rules counts under both), most Pods
    first, each with the newest examples (rows newest first in, as read)."""
    found: dict[tuple[str, str | None], RuleDenials] = {}
    for row in rows:
        explanation = row.explanation if isinstance(row.explanation, dict) else {}
        violations = [v for v in explanation.get("violations") or [] if isinstance(v, dict)]
        if not violations:  # no explanation kept: the field at fault is all the row says
            violations = [{"rule": UNRECORDED_RULE, "field": row.field, "message": row.field}]
        seen: set[tuple[str, str | None]] = set()
        for violation in violations:
            rule = str(violation.get("rule") or UNRECORDED_RULE)
            policy = violation.get("policy") if isinstance(violation.get("policy"), str) else None
            key = (rule, policy if rule != UNRECORDED_RULE else str(violation.get("field") or ""))
            if key in seen:  # the same rule broken by several containers: one Pod
                continue
            seen.add(key)
            group = found.get(key)
            if group is None:
                text = RULES.get(rule) or str(violation.get("rule_text") or rule)
                if rule == UNRECORDED_RULE:
                    text = f"rule not recorded (an older row); field at fault {key[1] or '(none)'}"
                group = found[key] = RuleDenials(rule=rule, rule_text=text, policy=policy)
            group.pods += 1
            if len(group.examples) < examples:
                group.examples.append({"url": row.get_absolute_url(), "pod": row.pod_name or row.generate_name,
                                       "message": str(violation.get("message") or "")})
    return sorted(found.values(), key=lambda g: (-g.pods, g.rule, g.policy or ""))


def would_deny_count(*, since: datetime, until: datetime, limit: int = COUNT_LIMIT) -> int:
    """Audit-only rows in the window that enforce would deny, counted up to `limit` + 1 (the partial index
    audit_would_deny: only those rows, the window's range of each day partition)."""
    rows = AdmissionAudit.objects.filter(WOULD_DENY_ROWS, created_at__gte=since, created_at__lte=until)
    return rows.order_by()[: limit + 1].count()
