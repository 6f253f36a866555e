"""PostgreSQL migrations ``NNN_name.sql``, applied in order; shipped in the wheel as ``statestore.postgres.ddl``."""
