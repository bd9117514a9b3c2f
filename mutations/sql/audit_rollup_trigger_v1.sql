-- The rollups' upkeep, version 1: statement triggers on the audit table keep mutations_auditrollup (per UTC hour)
-- and mutations_auditrollupdaily (per UTC day) equal to GROUP BY over its rows, in the transaction of every
-- INSERT (the writer's COPY), UPDATE, DELETE and TRUNCATE (mutations/audit/rollup.py, docs/audit-rollup.md).
-- First made by migration mutations 0010 (rebuilt with the table by 0014); run as it is by the squashed
-- migration 0001_squashed_0021_audit. A change to it is a new file (_v2) and a migration that runs it: every
-- database then has the same function under the same version.
--
-- 33336558566338049 is mutations.audit.partitions.ROLLUP_LOCK_KEY (0x766F6C63616E01), the advisory lock every
-- path that changes the rollups takes first. Written out, not filled in from the code: this text is what the
-- databases made by version 1 hold, whatever the code says later. tests/mutations/audit/test_partitions.py
-- checks that the number here, and in the function a migrated database holds, is the code's.

CREATE OR REPLACE FUNCTION mutations_audit_rollup_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One writer of the rollups at a time (the audit writer takes the lock before its COPY).
    PERFORM pg_advisory_xact_lock(33336558566338049);
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        -- GREATEST: a rollup edited by hand must not make a delete fail on its CHECK (>= 0).
        WITH counted AS (
            SELECT date_trunc('hour', created_at, 'UTC') AS hour, decision, namespace, preset_name,
                   count(*) AS admissions, coalesce(sum(vgpu_memory_mib), 0) AS vgpu_memory_mib
            FROM audit_old GROUP BY 1, 2, 3, 4
        ), hourly AS (
            UPDATE mutations_auditrollup r SET admissions = GREATEST(r.admissions - c.admissions, 0),
                   vgpu_memory_mib = GREATEST(r.vgpu_memory_mib - c.vgpu_memory_mib, 0)
            FROM counted c WHERE r.hour = c.hour AND r.decision = c.decision AND r.namespace = c.namespace
              AND r.preset_name = c.preset_name
        )
        UPDATE mutations_auditrollupdaily r SET admissions = GREATEST(r.admissions - c.admissions, 0),
               vgpu_memory_mib = GREATEST(r.vgpu_memory_mib - c.vgpu_memory_mib, 0)
        FROM (SELECT date_trunc('day', hour, 'UTC') AS day, decision, namespace, preset_name,
                     sum(admissions) AS admissions, sum(vgpu_memory_mib) AS vgpu_memory_mib
              FROM counted GROUP BY 1, 2, 3, 4) c
        WHERE r.day = c.day AND r.decision = c.decision AND r.namespace = c.namespace
          AND r.preset_name = c.preset_name;
        DELETE FROM mutations_auditrollup WHERE admissions = 0
          AND hour IN (SELECT DISTINCT date_trunc('hour', created_at, 'UTC') FROM audit_old);
        DELETE FROM mutations_auditrollupdaily WHERE admissions = 0
          AND day IN (SELECT DISTINCT date_trunc('day', created_at, 'UTC') FROM audit_old);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        WITH counted AS (
            SELECT date_trunc('hour', created_at, 'UTC') AS hour, decision, namespace, preset_name,
                   count(*) AS admissions, coalesce(sum(vgpu_memory_mib), 0) AS vgpu_memory_mib
            FROM audit_new GROUP BY 1, 2, 3, 4
        ), hourly AS (
            INSERT INTO mutations_auditrollup AS r (hour, decision, namespace, preset_name, admissions,
                                                    vgpu_memory_mib)
            SELECT * FROM counted
            ON CONFLICT (hour, decision, namespace, preset_name) DO UPDATE
            SET admissions = r.admissions + excluded.admissions,
                vgpu_memory_mib = r.vgpu_memory_mib + excluded.vgpu_memory_mib
        )
        INSERT INTO mutations_auditrollupdaily AS r (day, decision, namespace, preset_name, admissions,
                                                     vgpu_memory_mib)
        SELECT date_trunc('day', hour, 'UTC'), decision, namespace, preset_name, sum(admissions),
               sum(vgpu_memory_mib)
        FROM counted GROUP BY 1, 2, 3, 4
        ON CONFLICT (day, decision, namespace, preset_name) DO UPDATE
        SET admissions = r.admissions + excluded.admissions,
            vgpu_memory_mib = r.vgpu_memory_mib + excluded.vgpu_memory_mib;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION mutations_audit_rollup_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(33336558566338049);
    DELETE FROM mutations_auditrollup;
    DELETE FROM mutations_auditrollupdaily;
    RETURN NULL;
END $$;

CREATE TRIGGER audit_rollup_insert AFTER INSERT ON mutations_admissionaudit REFERENCING NEW TABLE AS audit_new
    FOR EACH STATEMENT EXECUTE FUNCTION mutations_audit_rollup_change();
CREATE TRIGGER audit_rollup_update AFTER UPDATE ON mutations_admissionaudit REFERENCING OLD TABLE AS audit_old
    NEW TABLE AS audit_new FOR EACH STATEMENT EXECUTE FUNCTION mutations_audit_rollup_change();
CREATE TRIGGER audit_rollup_delete AFTER DELETE ON mutations_admissionaudit REFERENCING OLD TABLE AS audit_old
    FOR EACH STATEMENT EXECUTE FUNCTION mutations_audit_rollup_change();
CREATE TRIGGER audit_rollup_truncate AFTER TRUNCATE ON mutations_admissionaudit
    FOR EACH STATEMENT EXECUTE FUNCTION mutations_audit_rollup_clear();
