# The everyday commands (CONTRIBUTING.md). `make check` before every commit: lint, types,
# unit and fuzz. `./scripts/test.sh` is what CI runs: setup, then everything below, in
# timed lanes. These targets assume the venv exists (`make venv` makes it). Real-kernel
# targets take the shared kernel lock, like every real-kernel run here.

VENV ?= .venv
BIN := $(VENV)/bin
LOCK := flock /tmp/contention-kernel.lock
UNIT := not kernel and not e2e and not probe and not vm and not fuzz and not image

.PHONY: help venv check lint fmt types unit fuzz fuzz-full image generate bpf check-generated \
	kernel e2e vm bench test

help:
	@echo "make venv             create .venv with the dev extras (scripts/setup.sh --test)"
	@echo "make check            before every commit: lint, types, unit, fuzz (~2 min)"
	@echo "make lint             ruff check + ruff format --check + mypy"
	@echo "make fmt              ruff format and ruff check --fix"
	@echo "make unit             unit tests on fixture trees (no root, no kernel)"
	@echo "make fuzz             the seeded fuzz runs at the suite's sizes (~30 s)"
	@echo "make fuzz-full        the fuzz runs at full size, bench/README.md (minutes)"
	@echo "make image            build the core and bcc images and inspect them (root)"
	@echo "make generate         regenerate rules, dashboards, promtool tests, metric tables"
	@echo "make bpf              rebuild the CO-RE probe bpf/sched_probe.bpf.o (clang)"
	@echo "make check-generated  fail when a generated file is stale (what CI runs)"
	@echo "make kernel           real-kernel tests (root; under the kernel lock)"
	@echo "make e2e              end-to-end tests with Prometheus and Alertmanager (root)"
	@echo "make vm               the VM lane: vm tests in a pure cgroup v2 guest (root; locked)"
	@echo "make bench            the benchmarks in bench/ (under the kernel lock)"
	@echo "make test             the whole suite in timed lanes, as CI runs it (scripts/test.sh)"

venv:
	bash scripts/setup.sh --test

# unit and fuzz in one pytest over every CPU (pytest-xdist): the inner loop under 3 minutes;
# worksteal because a few tests (fuzz runs, promtool) take 10-20 s each
check: lint
	$(BIN)/pytest -n auto --dist worksteal -m '($(UNIT)) or fuzz'

lint: types
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types:
	$(BIN)/mypy

fmt:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

unit:
	$(BIN)/pytest -m '$(UNIT)'

fuzz:
	$(BIN)/pytest -m fuzz tests/fuzz

fuzz-full:
	CONTENTION_PYTHON=$(abspath $(BIN))/python bash bench/fuzz_full.sh

image:
	$(BIN)/pytest -m image tests/image

generate:
	$(BIN)/contention-exporter rules generate
	$(BIN)/contention-exporter dashboards generate
	$(BIN)/python -m tests.support.promtool_tests
	$(BIN)/python -m tests.support.metrics_doc

bpf:
	bash scripts/build-bpf.sh

check-generated:
	bash scripts/check-generated.sh

kernel:
	$(LOCK) $(BIN)/pytest -m 'kernel or probe' tests/integration

e2e:
	$(LOCK) $(BIN)/pytest -m e2e tests/e2e

vm:
	$(LOCK) bash scripts/vm-test.sh

bench:
	$(LOCK) bash bench/run.sh

test:
	$(LOCK) bash scripts/test.sh
