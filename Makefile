# `make run` and `make test` work on a fresh machine with nothing but Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PORT ?= 8000

.PHONY: install run test lint format migrate clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(INSTALLED)

# A local, git-ignored settings file with a generated SECRET_KEY (the environment wins over it).
.env:
	@echo "SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))')" > $@
	@echo "Wrote .env with a new SECRET_KEY."

migrate: $(INSTALLED) .env
	$(BIN)/python manage.py migrate --noinput

run: migrate
	$(BIN)/python manage.py ensure_admin
	$(BIN)/python manage.py runhost --port $(PORT)

test: $(INSTALLED)
	$(BIN)/ruff check .
	SECRET_KEY=$${SECRET_KEY:-insecure-test-key} $(BIN)/python -m pytest

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var/
