"""The experiment YAMLs of this repository's workloads, one per experiment (package data).

``raylab.experiment`` finds them here in an installed or editable package; a lab adds its own
folder with ``--configs DIR`` or ``RAYLAB_CONFIGS``.
"""
