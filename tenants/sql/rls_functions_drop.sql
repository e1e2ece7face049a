-- Reverse of rls_functions.sql.
DROP FUNCTION IF EXISTS app_tenant_id();
DROP FUNCTION IF EXISTS app_user_id();
DROP FUNCTION IF EXISTS app_in_system_context();
