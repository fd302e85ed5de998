"""Test support for host apps and plugin authors (public API).

Installed as a pytest plugin (entry point ``pytest11``), so its fixtures are available in
any project that has protege installed:

- ``protege_db``: a fresh, migrated database for one test (SQLite in the test's temporary
  folder, or a throwaway schema on the PostgreSQL server named by
  ``PROTEGE_TEST_DATABASE_URL``); ``PROTEGE_DATABASE_URL`` points at it for the test.
"""

from protege.testing.database import TestDatabase, fresh_database

__all__ = ["TestDatabase", "fresh_database"]
