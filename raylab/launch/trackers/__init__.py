"""The trackers of ``--logger mlflow|wandb|tensorboard``, on the driver.

- ``logger_option``: the ``--logger`` option: each name checked, each tracker's destination
  checked before Ray starts, and the Tune callbacks made for the sweep.
- ``callbacks``: those callbacks, one per tracker (``ray.tune.logger.LoggerCallback``).
- ``payload``: what every tracker receives about a trial (its Config, the run's provenance, its
  metrics stepped by the workload's counter): pure functions.

Importing this package imports nothing.
"""
