"""The driver: what ``python -m raylab.tune`` runs once the experiment is loaded, and what it
starts in the trials. Nothing here is part of the workload API; a workload never imports it.

- ``cli``: the argument parser and ``--list`` that the commands share.
- ``checks``: before Ray starts, resources, the workload's preflight and the storage probes.
- ``ray_start``: a local Ray sized to this machine, or a cluster joined; ``storage_secrets``:
  the storage keys handed to a joined cluster's trials through a file, not Ray's job list.
- ``sweep``: the Tuner, run or resumed over one run folder; ``scheduler``: FIFO, ASHA or PBT.
- ``trainable``: the Tune trainable, which chooses the path of a trial: the loop itself (the
  Tune path) or a driver of a Ray Train run (``train_path``, with ``mailbox`` and ``ranks``);
  ``trial``: what runs in the trial's process on either path.
- Callbacks on the driver: ``progress`` (console lines), ``trackers`` (``--logger``: MLflow,
  W&B, TensorBoard), ``config_writer`` (each trial's resolved ``config.yaml``),
  ``disk_full`` (a trial that finds the disk full ends the sweep, without a restart);
  ``gauges``: the trials' time series in the Ray dashboard.
- ``summary``: the end-of-sweep table. What a cluster file would launch and what it costs is
  ``raylab.cluster``'s (the sweep takes its spot failure budget from ``raylab.cluster.prices``).

Only here are Ray Tune's ``Tuner`` and schedulers and Ray Train's ``TorchTrainer`` imported
(``tests/raylab/test_layering.py``). Importing this package imports nothing.
"""
