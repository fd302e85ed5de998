# Two commands: `make demo` sets up and shows protege at work; `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# `make test PYTHON=python3.13` builds and tests in a virtualenv of its own (.venv-python3.13).
ifeq ($(origin PYTHON),command line)
VENV := .venv-$(notdir $(PYTHON))
else
VENV := .venv
endif
# A pyenv shim answers only for the versions pyenv is set to; then take the interpreter
# from pyenv's versions directly.
PYTHON_EXE = $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null \
	|| ls -d $$(pyenv root 2>/dev/null)/versions/*/bin/$(notdir $(PYTHON)) 2>/dev/null | tail -1)
BIN := $(VENV)/bin
DISTRIBUTIONS := . plugins/protege-mail plugins/protege-files plugins/protege-web \
	plugins/protege-mcp plugins/protege-dashboard examples/protege-weather examples/protege-staging examples/the_scoop
STAMP := $(VENV)/.installed

.PHONY: install demo test test-sqlite test-postgres lint format bench clean

$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml examples/*/pyproject.toml)
	@test -x $(BIN)/python || $(PYTHON_EXE) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-e '.[test,docs]' $(addprefix -e ,$(filter-out .,$(DISTRIBUTIONS))) \
		-e 'plugins/protege-dashboard[test]'
	@touch $@

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/protege demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The whole suite on SQLite, then the tests that use the database again on PostgreSQL (found
# or started by the script).
test: lint test-sqlite test-postgres

# -n auto: one pytest-xdist worker per CPU, each with its own migrated test database. The
# dashboard's browser tests drive the Chromium the script finds (or installs, as root); the
# mail-server interop tests run private Postfix and OpenDKIM instances from Debian's packages.
test-sqlite: $(STAMP)
	driver="$$(scripts/chromium-for-tests)" && mail="$$(scripts/mail-servers-for-tests)" \
		&& PROTEGE_TEST_CHROMEDRIVER="$$driver" PROTEGE_TEST_MAIL_SERVERS="$$mail" \
		$(BIN)/python -m pytest -n auto

# Then the crash test, small: serve processes killed with kill -9 while mail comes in
# (bench/crash.py runs it in full).
test-postgres: $(STAMP)
	url="$$(scripts/postgres-for-tests)" && PROTEGE_TEST_DATABASE_URL="$$url" $(BIN)/python -m pytest -n auto -m protege_db \
		&& $(BIN)/python bench/crash.py --database-url "$$url" --messages 60 --kills 6 --concurrency 8 --deadline 300

bench: $(STAMP)
	$(BIN)/python bench/registry.py
	$(BIN)/python bench/access.py
	$(BIN)/python bench/parsing.py
	$(BIN)/python bench/compose.py
	$(BIN)/python bench/authentication.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/fairness.py

clean:
	rm -rf .venv .venv-* .pytest_cache .ruff_cache .pg-test
