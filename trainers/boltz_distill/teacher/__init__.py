"""The teachers of boltz_distill: what makes a per-heavy-atom embedding store from SMILES.

- ``cli``: ``python -m trainers.boltz_distill.teacher``, SMILES in, store out, any teacher.
- ``rdkit_teachers``: the conformer (ETKDGv3 + MMFF94) and descriptor teachers, and the
  resumable store building for them.
- ``boltz2``: the Boltz-2 teacher through the real ``boltz`` package (its own environment).
- ``ray_job``: the Boltz-2 teacher as a Ray job across a cluster's GPUs (``--address``).

Nothing is imported here: ``boltz2`` runs only where ``boltz`` is installed, the others where
Ray or RDKit are.
"""
