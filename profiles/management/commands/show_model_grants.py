"""manage.py show_model_grants: what each catalog model is granted per card, at a context and at its own."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db.models.functions import Lower

from mutations.engine import Knobs, LanguageModelSpec, catalog_need
from profiles.catalog import language_model_spec
from profiles.models import LanguageModel

ENGINES = ("vllm", "sglang", "tgi", "llama.cpp", "kserve-huggingface")
TP_CHOICES = (1, 2, 4, 8, 16)


def grant_text(model: LanguageModelSpec, *, engine: str, context: int | None, card_mib: int) -> str:
    """The grant per card on the fewest GPUs (tensor parallel 1, 2, 4, ...) that fit the card, e.g. `2 x 41,216`."""
    for tp in TP_CHOICES:
        need = catalog_need(model, Knobs(engine=engine, tp=tp, max_model_len=context))
        if need.per_card_mib <= card_mib:
            return f"{need.per_card_mib:,}" if tp == 1 else f"{tp} x {need.per_card_mib:,}"
    return "does not fit 16 cards"


class Command(BaseCommand):
    help = "Print the vGPU memory per card each catalog model is granted at a context and at its native context."

    def add_arguments(self, parser):
        parser.add_argument("--card-mib", type=int, default=81920,
                            help="Memory of one card in MiB (default 81920: an 80 GB card).")
        parser.add_argument("--context", type=int, default=8192,
                            help="The --max-model-len of the first grant column (default 8192; a model's own "
                                 "context when that is shorter).")
        parser.add_argument("--engine", choices=ENGINES, default="vllm", help="The inference server (default vllm).")
        parser.add_argument("--model", action="append", default=[], help="Only these catalog names (repeatable).")

    def handle(self, *args, card_mib: int, context: int, engine: str, model: list[str], **options):
        if card_mib < 1 or context < 1:
            raise CommandError("--card-mib and --context are whole numbers above 0")
        rows = LanguageModel.objects.order_by(Lower("name"))
        if model:
            rows = rows.filter(name__in=model)
            missing = sorted(set(model) - set(rows.values_list("name", flat=True)))
            if missing:
                raise CommandError(f"not in the catalog: {', '.join(missing)}; see /api/v1/models/")
        self.stdout.write(f"| model | parameters | layers / KV heads / head dim | native context "
                          f"| MiB per card at {context:,} tokens | MiB per card at native context |")
        self.stdout.write("|---|---|---|---|---|---|")
        for row in rows:
            spec = language_model_spec(row)
            short = min(context, spec.max_context)
            params = f"{row.params_b.normalize():f}B" + (
                f" ({row.active_params_b.normalize():f}B active)" if row.active_params_b is not None else "")
            self.stdout.write(
                f"| [{row.name}]({row.source_url}) | {params} | {row.layers} / {row.kv_heads} / {row.head_dim} "
                f"| {row.max_context:,} | {grant_text(spec, engine=engine, context=short, card_mib=card_mib)} "
                f"| {grant_text(spec, engine=engine, context=None, card_mib=card_mib)} |")
