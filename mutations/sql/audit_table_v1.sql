-- The audit table on PostgreSQL, version 1: partitioned by UTC day of created_at (mutations/audit/partitions.py,
-- docs/audit-rollup.md), as migrations mutations 0001-0021 left it. Run by the squashed migration
-- 0001_squashed_0021_audit, which then adds the indexes the model declares, the trigram index below, the day
-- partitions and their uid indexes (the code's own partitions.audit_partitions_create) and the rollups' triggers
-- (audit_rollup_trigger_v1.sql). The columns are in the order the old migrations added them; the detail
-- columns are bytea (mutations/compression), inputs is json (mutations.models.StoredJSONField).

CREATE TABLE mutations_admissionaudit (
    id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    request_uid character varying(128) NOT NULL,
    operation character varying(16) NOT NULL,
    namespace character varying(253) NOT NULL,
    pod_name character varying(253) NOT NULL,
    generate_name character varying(253) NOT NULL,
    owner_kind character varying(63) NOT NULL,
    owner_name character varying(253) NOT NULL,
    username character varying(256) NOT NULL,
    decision character varying(16) NOT NULL,
    reason text NOT NULL,
    field character varying(256) NOT NULL,
    preset_name character varying(63) NOT NULL,
    policy_name character varying(253) NOT NULL,
    source character varying(128) NOT NULL,
    gpus_requested numeric(12,3) NOT NULL,
    vgpus_granted integer NOT NULL,
    vgpu_memory_mib bigint NOT NULL,
    containers bytea NOT NULL,
    patch bytea NOT NULL,
    warnings bytea NOT NULL,
    dry_run boolean NOT NULL,
    duration_ms double precision NOT NULL,
    replica character varying(253) NOT NULL,
    resources_before bytea NOT NULL,
    -- database defaults: spooled rows of an older release, written without these columns, load
    caller_verified boolean DEFAULT false NOT NULL,
    explanation bytea,
    config_version bigint DEFAULT 0 NOT NULL,
    inputs json DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT mutations_admissionaudit_vgpu_memory_mib_check CHECK ((vgpu_memory_mib >= 0)),
    CONSTRAINT mutations_admissionaudit_vgpus_granted_check CHECK ((vgpus_granted >= 0))
) PARTITION BY RANGE (created_at);

-- A sequence rather than an identity column: every partition's id takes the parent's default.
CREATE SEQUENCE mutations_admissionaudit_id_seq AS bigint OWNED BY mutations_admissionaudit.id;
-- PostgreSQL wants the partition key in every unique index: the key is (id, created_at), and a replayed
-- request uid is skipped by the writer (mutations/audit/inserters.py), not by a constraint.
ALTER TABLE mutations_admissionaudit ALTER COLUMN id SET DEFAULT nextval('mutations_admissionaudit_id_seq'),
    ADD PRIMARY KEY (id, created_at);

-- Rows of a day without a partition of its own land here, so no write ever fails for a missing day.
CREATE TABLE mutations_admissionaudit_default PARTITION OF mutations_admissionaudit DEFAULT;
