# `make run` and `make test` work on a fresh machine with nothing but Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PORT ?= 8000

.PHONY: install run test lint format migrate clean seed chromium prometheus screenshots mutants \
	known-breaks compose-test chaos schemathesis-stateful

seed: migrate
	$(BIN)/python manage.py seed_reference

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

# The reference scenario is seeded once; later runs keep what operators changed in admin.
var/.reference-seeded: | migrate
	$(BIN)/python manage.py seed_reference
	touch $@

run: migrate var/.reference-seeded
	$(BIN)/python manage.py ensure_admin
	$(BIN)/python manage.py runhost --port $(PORT)

# Browser tests drive Debian's Chromium (Playwright never downloads a browser here).
chromium:
	@command -v chromium >/dev/null || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

# The metrics test scrapes the host with Debian's Prometheus server.
prometheus:
	@command -v prometheus >/dev/null || { \
	  echo "Installing Debian's prometheus for the metrics test"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

# Two pytest-xdist workers, a test module each at a time (module-scoped browsers and host
# processes stay in one worker); most tests wait on processes, browsers and sockets.
test: $(INSTALLED) chromium prometheus
	$(BIN)/ruff check .
	SECRET_KEY=$${SECRET_KEY:-insecure-test-key} $(BIN)/python -m pytest -n 2 --dist loadfile

# docker-compose.yml, unmodified, on a real Docker engine (Debian's docker.io and the Compose v2
# plugin are installed and started when missing; local stand-ins for the public images when they
# cannot be pulled, built once): prints the build and start times, the image size, every check.
compose-test:
	PIP="$(PYTHON) -m pip" bash docker/engine.sh
	$(PYTHON) docker/compose_test.py

# The README's pictures, from the end-to-end browser test (needs PostgreSQL and Redis as for CI;
# Japanese text needs a CJK font).
screenshots: $(INSTALLED) chromium
	@fc-list | grep -q "Noto Sans CJK" || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -qq fonts-noto-cjk; }
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mcplet_host} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/15} SECRET_KEY=$${SECRET_KEY:-insecure-test-key} \
	MCPLET_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest tests/e2e/test_reference_browser.py \
	  tests/mcplet_host/test_metrics_prometheus.py tests/mcplet_host/test_tracing_processes.py

# Mutation testing of the enforcement modules (cosmic-ray; slow, never in CI): prints each
# target's killed/survived counts and the survivors' diffs. `make mutants TARGETS=audit` for one
# (the targets: python tests/mutants/run.py --list). Needs PostgreSQL and Redis as for CI.
MUTANT_ENV = DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/mcplet_host} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/15} SECRET_KEY=$${SECRET_KEY:-insecure-test-key}
mutants: $(INSTALLED)
	$(MUTANT_ENV) $(BIN)/python tests/mutants/run.py $(TARGETS)

# The breaks issue 14 found unnoticed, each applied in turn: every one must be killed.
known-breaks: $(INSTALLED)
	$(MUTANT_ENV) $(BIN)/python tests/mutants/known.py

# Faults at random moments on the host's real processes (tests/faults/harness.py): prints
# "N iterations, K faults (by kind), 0 lost, ...". CI runs 10 iterations in the suite; replay a
# failing one with `make chaos CHAOS_SEED=<seed> CHAOS_ITERATIONS=1`. Needs PostgreSQL (Redis:
# the harness starts its own redis-server).
CHAOS_ITERATIONS ?= 100
chaos: $(INSTALLED)
	$(MUTANT_ENV) CHAOS_ITERATIONS=$(CHAOS_ITERATIONS) CHAOS_SEED=$(CHAOS_SEED) \
	  $(BIN)/python -m pytest -p no:xdist -s -q tests/faults/test_chaos.py

# Schemathesis's stateful run on the partner API with 1,000 requests (CI runs 150 in the suite).
STATEFUL_REQUESTS ?= 1000
schemathesis-stateful: $(INSTALLED)
	$(MUTANT_ENV) STATEFUL_REQUESTS=$(STATEFUL_REQUESTS) $(BIN)/python -m pytest -p no:xdist -s -q \
	  tests/a2a/test_schemathesis.py -k stateful

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) var/
