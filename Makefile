# make test: fresh .venv, install, run the whole suite.  make demo: a smoke sweep on a local Ray.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-long demo docs screenshots bench clean boltz-env mlflow-server-env chromium sshd device-rehearsal lock

# torchattacks (the fair_adv tests' independent PGD) goes in with --no-deps: its metadata asks
# for torchvision (a second torch build) and requests~=2.25, and its code imports neither.
# molsets (MOSES) too: boltz_distill reads only the molecule files its wheel ships.
# The -e line installs every workload's extra (pyproject.toml: one per workload) and dev, docs, aws,
# at the versions the cluster nodes' lock pins (cluster/lock/cpu-py311.txt as constraints, torch
# aside: it is the line before), so the tests run what the nodes run.
$(STAMP): pyproject.toml Makefile cluster/lock/cpu-py311.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	grep -v '^torch==' cluster/lock/cpu-py311.txt > $(VENV)/lock-constraints.txt
	$(PY) -m pip install --quiet -e ".[dev,docs,dqn_softlinf,backdoor,fair_adv,boltz_distill,seagram,aws]" -c $(VENV)/lock-constraints.txt
	$(PY) -m pip install --quiet --no-deps torchattacks==3.5.1
	$(PY) -m pip install --quiet --no-deps molsets==0.3.1
	# molsets' wheel also installs a top-level 'tests' package, which would shadow this repo's tests/
	rm -rf "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tests"
	touch $(STAMP)

# Boltz-2 teacher environment (trainers/boltz_distill): boltz pins numpy<2, scipy 1.13.1 and
# pytorch-lightning 2.5.0, which the main .venv cannot hold. torch stays 2.13.0: installed first
# (local wheel), boltz then finds it satisfied. About 2 minutes; the teacher tests need it.
BOLTZ_VENV := .venv-boltz
BOLTZ_STAMP := $(BOLTZ_VENV)/.installed

$(BOLTZ_STAMP): Makefile
	test -x $(BOLTZ_VENV)/bin/python || $(PYTHON) -m venv $(BOLTZ_VENV)
	$(BOLTZ_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(BOLTZ_VENV)/bin/python -m pip install --quiet boltz==2.2.1
	$(BOLTZ_VENV)/bin/python -c "import torch, boltz.model.models.boltz2; assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__"
	touch $(BOLTZ_STAMP)

boltz-env: $(BOLTZ_STAMP)

# A real MLflow tracking server for the tracker tests (tests/raylab/launch/test_tracking_server.py):
# the full mlflow package serves; the main .venv has only the client (mlflow-skinny), and the
# full package's pins (pyarrow<26 in 3.17) clash with the cluster lock, so it gets its own
# environment. About a minute.
MLFLOW_VENV := .venv-mlflow
MLFLOW_STAMP := $(MLFLOW_VENV)/.installed

$(MLFLOW_STAMP): Makefile
	test -x $(MLFLOW_VENV)/bin/python || $(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/python -m pip install --quiet mlflow==3.17.2
	$(MLFLOW_VENV)/bin/mlflow --version
	touch $(MLFLOW_STAMP)

mlflow-server-env: $(MLFLOW_STAMP)

# Debian's Chromium for the report's browser test: installed when missing and this user may
# (root, as in CI); otherwise that one test is skipped and says why.
chromium:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "warning: could not install chromium; the report's browser test will be skipped"; \
	fi

# Debian's OpenSSH server and rsync for the loopback `ray up` test (nodes on 127.0.0.x reached
# over SSH, the tree copied by Ray's rsync); installed the same way, otherwise that test is skipped.
sshd:
	@if { [ ! -x /usr/sbin/sshd ] || ! command -v rsync >/dev/null; } && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync >/dev/null) \
	  || echo "warning: could not install openssh-server/rsync; the loopback ray up test will be skipped"; \
	fi

# The lock files every cluster node installs (cluster/lock/, docs/cluster.md "Images and lock files"):
# the dependencies of raylab[NODE_EXTRAS] for Linux x86_64 and Python 3.11 (the image's),
# resolved by uv. gpu-py311.txt: torch 2.13.0 from PyPI, whose Linux wheel is the CUDA build
# (its nvidia-* libraries pinned too), for GPU nodes and cluster/Dockerfile. cpu-py311.txt: the
# same pins with torch's CPU build (2.13.0+cpu, PyTorch's CPU index) and no CUDA libraries, for
# the head and CPU nodes; resolved under the GPU lock's pins as constraints, so the two agree.
# An existing lock's pins are kept where they still resolve (uv prefers them): to move
# everything to the newest releases, delete the two files first. Needs PyPI; TORCH_CPU_INDEX
# is where torch's CPU build is found (a wheel folder works too: TORCH_CPU_INDEX="--find-links DIR").
NODE_EXTRAS := dqn_softlinf backdoor fair_adv boltz_distill seagram aws
LOCK_VENV := .venv-lock
TORCH_CPU_INDEX ?= --extra-index-url https://download.pytorch.org/whl/cpu
LOCK_ARGS = pyproject.toml $(NODE_EXTRAS:%=--extra %) --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --no-config \
	--custom-compile-command "make lock"
lock:
	test -x $(LOCK_VENV)/bin/uv || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet uv==0.13.9; }
	$(LOCK_VENV)/bin/uv pip compile $(LOCK_ARGS) -o cluster/lock/gpu-py311.txt
	grep -vE '^(torch==|triton==|nvidia-|cuda-)' cluster/lock/gpu-py311.txt > $(LOCK_VENV)/gpu-pins.txt
	$(LOCK_VENV)/bin/uv pip compile $(LOCK_ARGS) $(TORCH_CPU_INDEX) --index-strategy unsafe-best-match \
	  --no-annotate -c $(LOCK_VENV)/gpu-pins.txt -o cluster/lock/cpu-py311.txt

# Every run records its test durations: the 30 slowest in the log, all of them in the junit file.
test: $(STAMP) $(BOLTZ_STAMP) $(MLFLOW_STAMP) chromium sshd
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	$(PY) -m pytest -q --durations=30 --junitxml=test-output/junit.xml

# The tests marked `long` (multi-seed science, repeated fault scenarios), which `make test` skips.
test-long: $(STAMP) $(BOLTZ_STAMP) $(MLFLOW_STAMP) chromium sshd
	RAYLAB_LONG_TESTS=1 $(PY) -m pytest -q -m long --durations=30 --junitxml=test-output/junit-long.xml

demo: $(STAMP)
	$(PY) -m raylab.tune dqn_softlinf --smoke

# The documentation site on http://127.0.0.1:8000, rebuilt on each change (mkdocs.yml, docs/);
# its reference pages are generated from the code as it builds.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# The report's screenshots in docs/images/ (report_claims.png, report_sweep.png), written by the
# test that checks a real report in Chromium, so that the pictures are of what that test checked.
screenshots: $(STAMP) chromium
	RAYLAB_DOCS_IMAGES=$(CURDIR)/docs/images $(PY) -m pytest -q -p no:cacheprovider tests/raylab/report/test_report_chromium.py

# Side-by-side throughput figures (ratios), one script per target; minutes each on 2 CPU cores.
bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,dqn_softlinf,backdoor,fair_adv,boltz_distill,seagram]"
	$(PY) benchmarks/trial_overhead.py
	$(PY) benchmarks/trial_paths.py
	$(PY) benchmarks/dqn_throughput.py
	$(PY) benchmarks/image_throughput.py
	$(PY) benchmarks/probe_cost.py
	$(PY) benchmarks/adv_throughput.py
	$(PY) benchmarks/mol_throughput.py
	$(PY) benchmarks/graph_feed.py
	$(PY) benchmarks/image_speed.py --width 16 --batch-size 32 --threads 1
	$(PY) benchmarks/seagram_cost.py

# The GPU check rehearsed here: .kit/ built (benchmarks/device_kit.py), then
# benchmarks/device_rehearsal.py: a Python 3.12 venv as the GPU machine has it (torch 2.11 from PyPI,
# its package list as constraints, no Ray), cached outside the tree (RAYLAB_DEVICE_VENV, default
# ~/.cache/raylab/device-py312-torch2.11; the first build downloads about 4 GB), the kit unpacked by
# gpu_check.sh as there, every step's CPU twin. About 20 minutes on 2 cores.
DEVICE_DEPS ?= $(STAMP)
REHEARSAL_OUT ?= results/device-rehearsal
device-rehearsal: $(DEVICE_DEPS)
	$(PY) benchmarks/device_kit.py
	$(PY) benchmarks/device_rehearsal.py --out $(REHEARSAL_OUT)

clean:
	rm -rf $(VENV) $(BOLTZ_VENV) $(MLFLOW_VENV) results
