-- The history's free-text search on the Pod's name, `pod_name LIKE '%term%' OR generate_name LIKE '%term%'`
-- (mutations/audit/filters.py): one trigram GIN index on both columns, read as one bitmap scan per column.
-- PostgreSQL only and not declared on the model: SQLite (development) has no GIN and searches by scanning.
-- A 512 kB pending list per index keeps almost all of the insert saving of the list at about the bytes a row
-- of `fastupdate = off` (migrations mutations 0015 and 0016; docs/audit-rollup.md, "Bytes per row").
-- pg_trgm is a trusted extension: the database owner may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX audit_pod_names_trgm ON mutations_admissionaudit
    USING gin (pod_name gin_trgm_ops, generate_name gin_trgm_ops) WITH (gin_pending_list_limit = 512);
