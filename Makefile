# Task Lab — thin targets; each calls one Python entry point.
# Run `make help` for the lessons.

# Keep the runner's exit codes (0 passed, 1 a check failed, 2 usage): in question mode (-q) make returns
# its recipe's status itself instead of turning every failure into 2 with an "Error 1" line.  Question
# mode runs only recipe lines marked `+`, so every recipe line here starts with `+`.
MAKEFLAGS += -q

PYTHON ?= python3
VPY := .venv/bin/python
VENV_READY := .venv/.installed

.DEFAULT_GOAL := help
.PHONY: help venv check forget test test-all doctor watch clean list bench soak monitor flake grade-drill services services-down services-status

help:
	+@$(PYTHON) -m checks help

$(VENV_READY): requirements.txt requirements-dev.txt
	+@$(if $(filter file,$(origin PYTHON)),,TASKLAB_PYTHON=$(PYTHON)) $(PYTHON) -m shared.bootstrap

venv: $(VENV_READY)

lesson-%: $(VENV_READY)
	+@$(VPY) -m checks lesson $*

diff-%:
	+@$(PYTHON) -m checks diff $*

list:
	+@$(PYTHON) -m checks list

# make check [LAB=DIR] [LESSON=NN|all] [REPORT=FILE.json] [JUNIT=FILE.xml] [HTML=FILE.html]: YOUR folder, given once with
# LAB= and remembered; without LESSON, the lesson you are on.  (make lesson-NN shows the reference.)
# make check REPEAT=N [BURN=C] [PARALLEL=K] [SEED=S]: N runs under load, each check's passes counted (checks/repeat.py).
check: $(VENV_READY)
	+@$(VPY) -m checks check $(LESSON) $(if $(LAB),--lab "$(LAB)") $(if $(REPORT),--report "$(REPORT)") $(if $(JUNIT),--junit "$(JUNIT)") $(if $(HTML),--html "$(HTML)") \
	  $(if $(REPEAT),--repeat $(REPEAT)) $(if $(PARALLEL),--parallel $(PARALLEL)) $(if $(BURN),--burn $(BURN)) $(if $(SEED),--seed $(SEED))

forget:
	+@$(PYTHON) -m checks check --forget

# exec: no shell stays between make and watch, so Ctrl-C ends watch quietly (a waiting shell would
# re-raise the interrupt and make would print its own error line).
watch: $(VENV_READY)
	+@exec $(VPY) -m checks watch $(LESSON) $(if $(LAB),--lab "$(LAB)")

doctor:
	+@if [ -x $(VPY) ]; then $(VPY) -m checks doctor; else $(PYTHON) -m checks doctor; fi

# -n 6: six test workers (four left two cores 88 % busy, six keep them 95 % busy: the gaps are tests
# waiting on real state), each with its own isolation slot for the tests that use the shared servers; --maxschedchunk 1: tests are handed out one at a time,
# longest first (tests/conftest.py), so no worker is left with a queue at the end.
test: $(VENV_READY)
	+@$(if $(DAY),LAB_TEST_DAY=$(DAY)) $(VPY) -m pytest -n 6 --maxschedchunk 1

# Everything make test samples, whole: every mutant, every check alone, every lesson graded as finished.
test-all: $(VENV_READY)
	+@LAB_TEST_ALL=1 $(VPY) -m pytest -n 6 --maxschedchunk 1

clean:
	+@$(PYTHON) -m checks clean

# make bench [QUICK=1]: benchmarks print tables and write JSON; they are never asserted in tests.
bench: $(VENV_READY)
	+@$(VPY) -m checks bench $(if $(QUICK),--quick)

# make soak [SEED=N]: 500 jobs while workers are killed and both servers restart; lost must be 0.
# (make test runs the short form, 100 jobs.)
soak: $(VENV_READY)
	+@$(VPY) -m checks soak --long $(if $(SEED),--seed $(SEED))

# make monitor [PORT=8016]: lesson 16's numbers live in the browser; during make soak (another terminal)
# it shows the soak's backlog, else the services of make services.
monitor: $(VENV_READY)
	+@exec $(VPY) -m checks monitor $(if $(PORT),--port $(PORT))

# make flake [LESSON=NN] [ROUNDS=N] [PARALLEL=K] [BURN=C]: the reference, N rounds of K isolated copies side by
# side, C processes burning CPU meanwhile; every non-pass is printed and written to .state/flake/flake.json.
flake: $(VENV_READY)
	+@$(VPY) -m checks flake $(or $(LESSON),all) --rounds $(or $(ROUNDS),3) --parallel $(or $(PARALLEL),2) --burn $(or $(BURN),0) $(if $(SEED),--seed $(SEED))

# make grade-drill: class grading spread over three Celery workers while one is killed, one stopped and the
# broker restarted; the ledger must show every folder graded once and verdicts equal to a local grade.
grade-drill: $(VENV_READY)
	+@$(VPY) -m checks.grade_drill --out .state/grade-drill.json

# Redis + MySQL for lessons 08–16 (lessons start them on their own; these are for poking around).
services: $(VENV_READY)
	+@$(VPY) -m shared.servicectl up

services-down: $(VENV_READY)
	+@$(VPY) -m shared.servicectl down

services-status: $(VENV_READY)
	+@$(VPY) -m shared.servicectl status
