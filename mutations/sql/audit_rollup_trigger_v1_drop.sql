-- Undoes audit_rollup_trigger_v1.sql (the squashed migration's reverse): the triggers, then their functions.
DROP TRIGGER IF EXISTS audit_rollup_insert ON mutations_admissionaudit;
DROP TRIGGER IF EXISTS audit_rollup_update ON mutations_admissionaudit;
DROP TRIGGER IF EXISTS audit_rollup_delete ON mutations_admissionaudit;
DROP TRIGGER IF EXISTS audit_rollup_truncate ON mutations_admissionaudit;
DROP FUNCTION IF EXISTS mutations_audit_rollup_change();
DROP FUNCTION IF EXISTS mutations_audit_rollup_clear();
