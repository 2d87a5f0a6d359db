"""raylab: research training workloads as Ray Tune sweeps of Ray Train workers."""

__version__ = "0.1.0"
