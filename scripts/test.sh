#!/usr/bin/env bash
# The whole test suite: lint, unit tests and simulation (tests/), then real
# processes and real Spark (integration_tests/). Extra arguments go to pytest.
source "$(dirname "$0")/env.sh"
ruff check .
ruff format --check .
# the type check: configured in setup.cfg's [mypy] (strict on raft, storage, producers
# and the coordinator); a type error fails the run as a lint error does
python -m mypy
# pytest exits 5 when it collected no tests; with `set -e` that fails the run.
python -m pytest "$@"
