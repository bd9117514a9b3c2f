"""Audit-only as a rehearsal: what enforce would have done in a namespace, read from the audit rows.

An audit-only row says "would deny: ..." or "would apply: ..." in its reason (the engine writes it so);
every query here starts from an index range (namespace or decision, then time) and reads no more rows
than the window holds for that namespace, or a bounded number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from ..engine import Decision
from ..engine.denial import RULES
from ..models import WOULD_DENY_PREFIX, WOULD_DENY_ROWS, AdmissionAudit

REHEARSAL_DAYS = 7
# Would-deny rows read to group them by the rule that would deny (the newest first): enough to rank the rules
# of any namespace, bounded for the database and the page. The page says when it read fewer than there are.
RULE_ROWS_READ = 2_000
# Pods shown as examples under each rule.
RULE_EXAMPLES = 3
# The overview counts rehearsed denials up to this many, then says "more than".
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Rehearsal:
    """What enforce would have done in one namespace over the last days, and what it did where enforced."""

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


@dataclass
class RuleDenials:
    """One rule enforce would deny Pods for: how many of the rows read break it, and the newest examples."""

    rule: str
    rule_text: str
    policy: str | None
    pods: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


def namespace_rehearsal(*, namespace: str, days: int = REHEARSAL_DAYS, now: datetime | None = None) -> Rehearsal:
    """Counts of a namespace's admissions by what enforce would do (index audit_namespace_created: one range)."""
    since = (now or timezone.now()) - timedelta(days=days)
    rows = AdmissionAudit.objects.filter(namespace=namespace, created_at__gte=since)
    audit_only = Q(decision=Decision.AUDIT_ONLY.value)
    totals = rows.aggregate(
        would_deny=Count("id", filter=WOULD_DENY_ROWS),
        would_apply=Count("id", filter=audit_only & ~Q(reason__startswith=WOULD_DENY_PREFIX)),
        would_grant_mib=Sum("vgpu_memory_mib", filter=audit_only & ~Q(reason__startswith=WOULD_DENY_PREFIX)),
        denied=Count("id", filter=Q(decision=Decision.DENIED.value)),
        mutated=Count("id", filter=Q(decision=Decision.MUTATED.value)),
    )
    # What enforce would refuse, by the rule that would deny (each row's explanation lists every rule it breaks).
    denials = list(rows.filter(WOULD_DENY_ROWS).order_by("-created_at", "-id")
                   .only("id", "created_at", "pod_name", "generate_name", "field", "explanation")[:RULE_ROWS_READ])
    policies = sorted(p for p in rows.order_by().values_list("policy_name", flat=True).distinct()[:20] if p)
    return Rehearsal(namespace=namespace, since=since, would_deny=totals["would_deny"] or 0,
                     would_apply=totals["would_apply"] or 0, would_grant_mib=int(totals["would_grant_mib"] or 0),
                     denied=totals["denied"] or 0, mutated=totals["mutated"] or 0,
                     rules=rules_of(denials), rules_read=len(denials), policies=policies)


# Rows written before denials were explained name only the field at fault: grouped under it.
UNRECORDED_RULE = "(not recorded)"


def rules_of(rows: list[AdmissionAudit]) -> list[RuleDenials]:
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
            if len(group.examples) < RULE_EXAMPLES:
                group.examples.append({"url": row.get_absolute_url(), "pod": row.pod_name or row.generate_name,
                                       "message": str(violation.get("message") or "")})
    return sorted(found.values(), key=lambda g: (-g.pods, g.rule, g.policy or ""))


def would_deny_count(*, since: datetime, until: datetime, limit: int = COUNT_LIMIT) -> int:
    """Audit-only rows in the window that enforce would deny, counted up to `limit` + 1 (the partial index
    audit_would_deny: only those rows, the window's range of each day partition)."""
    rows = AdmissionAudit.objects.filter(WOULD_DENY_ROWS, created_at__gte=since, created_at__lte=until)
    return rows.order_by()[: limit + 1].count()
