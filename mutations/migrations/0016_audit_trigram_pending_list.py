"""The trigram index of the Pod-name search takes rows through a small pending list again.

0015 built it with `fastupdate = off` to save index bytes. Inserting each row's trigrams straight into
the GIN tree made every audit row cost PostgreSQL 2-3 times the CPU (scripts/bench-audit-write, Pod names
all different as in a cluster: 260 µs a row against 93 µs with the pending list), and cut the audited
`/mutate` throughput of scripts/bench by about a quarter. The default pending list (4 MB a partition)
cost the bytes 0015 saw: each day partition's index keeps up to 4 MB of list pages, most of a small
day's index. A 512 kB list (`gin_pending_list_limit`, per index) keeps almost all of the insert saving
(103 µs a row) at 84 bytes a row against 79 with `fastupdate = off` and 101 with 4 MB (400,000 rows of
`fill_audit` over 2 days, after VACUUM). docs/audit-rollup.md, "Bytes per row"; docs/benchmarks.md.

A partitioned index's options cannot be altered: the index is rebuilt. That holds the table's SHARE
lock while it builds (reads go on; the webhook's writer waits and its rows stay spooled): about 12 s
per million rows on this machine's two cores.
"""

import importlib

from django.db import migrations

# 0015 rebuilds the index with the options it is given; so does this migration.
_trigram = importlib.import_module("mutations.migrations.0015_audit_fewer_index_bytes")._trigram

PENDING_LIST_KB = 512


class Migration(migrations.Migration):

    dependencies = [
        ("mutations", "0015_audit_fewer_index_bytes"),
    ]

    operations = [
        migrations.RunPython(_trigram(f" WITH (gin_pending_list_limit = {PENDING_LIST_KB})"),
                             _trigram(" WITH (fastupdate = off)")),
    ]
