"""``raylab.testing``: a pytest plugin for a lab's own workloads and experiments.

Load it with ``pytest -p raylab.testing`` (or ``addopts = "-p raylab.testing"`` in the lab's
``[tool.pytest.ini_options]``, or the lab's own ``pytest11`` entry point naming
``raylab.testing``). It gives:

Fixtures (``raylab.testing.fixtures``)
    ``ray_session``: one local Ray per test session (``--raylab-cpus``, default 2), or the Ray
    at ``RAYLAB_TEST_RAY_ADDRESS`` when that is set (a test that runs pytest in a subprocess
    hands it its own session's Ray so); ``smoke_sweep``: an experiment's ``--smoke`` sweep
    through Ray Tune; ``shared_smoke_sweep``: the same, run once per session for tests that
    only read it; ``local_trial``: one smoke trial in-process, as ``python -m raylab.train``
    runs it; ``one_thread`` / ``one_thread_module``: torch on one thread.

Checks (``raylab.testing.checks``), plain functions that raise ``AssertionError``
    ``validate_experiment(name)``: the YAML loads in both modes and meets the contract;
    ``validate_workload(name)``: its Config is frozen, documented and valid at its defaults;
    ``check_smoke_result(results, experiment)``: every trial ended and reported the metric;
    ``assert_finite_metrics(row, names)``; ``workload_api_violations(paths)``: the imports of
    a workload package outside ``raylab.workloads.WORKLOAD_API``; ``science_seeds(default)``:
    the seeds of a science test, ``RAYLAB_SCIENCE_SEEDS`` (comma-separated) where it is set.

Host syncs (``raylab.testing.host_sync``, imported on its own: it imports torch)
    ``trace_step(build, step)``: a training step run on fake tensors under a dispatch mode
    that flags each device read, data-dependent shape and host-made tensor, with the line
    that made it (``HostSyncs.syncs()``).

A lab's test file, with its workloads in the ``raylab.workloads`` entry-point group and its
YAMLs in ``raylab.experiments``::

    from raylab.testing import check_smoke_result, validate_experiment

    def test_my_experiment(smoke_sweep):
        validate_experiment("my_experiment")
        results, run_path, experiment = smoke_sweep("my_experiment")
        check_smoke_result(results, experiment)

Importing this package is cheap: raylab and Ray are imported by the fixtures that use them.
"""

from raylab.testing.checks import (
    assert_finite_metrics,
    check_smoke_result,
    science_seeds,
    torch_on_one_thread,
    validate_experiment,
    validate_workload,
    workload_api_violations,
)
from raylab.testing.fixtures import (
    ADDRESS_ENV,
    local_trial,
    one_thread,
    one_thread_module,
    pytest_addoption,
    ray_session,
    shared_smoke_sweep,
    smoke_sweep,
)

__all__ = [
    "ADDRESS_ENV",
    "assert_finite_metrics",
    "check_smoke_result",
    "local_trial",
    "one_thread",
    "one_thread_module",
    "pytest_addoption",
    "ray_session",
    "science_seeds",
    "shared_smoke_sweep",
    "smoke_sweep",
    "torch_on_one_thread",
    "validate_experiment",
    "validate_workload",
    "workload_api_violations",
]
