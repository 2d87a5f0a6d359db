"""``python -m trainers.boltz_distill.students RUN``: the trained students of a boltz_distill run.

Lists the finished trials of a ``boltz_distill`` run (its loop returned: the last row says
``done``, or the run recorded the trial ended; no error) that hold a student checkpoint
(``checkpoint_*/state.pt``), with each one's teachers, layer, width, depth, lr and seed, and
the step whose student is probed (the lowest ``distill/val_loss`` it reported), and
prints the ``admet_probe`` overrides that probe every one of them (one trial per student and
split seed, so one table row per student)::

    python -m raylab.tune admet_probe config.features=student config.students_from=RUN \\
        'search.student_trial=[TRIAL_A, TRIAL_B]' 'search.variant=[{features: student, probe: mlp}]'
"""

from __future__ import annotations

import argparse
import json
import sys

from raylab.checkpoint import STATE_FILE
from raylab.errors import UserError, exit_on_user_error
from raylab.run_folder import RunFolder


def run_students(run_dir: str) -> list[str]:
    """Names of the finished trials of ``run_dir`` (a path or a storage URI) with a student
    checkpoint, sorted."""
    from trainers.boltz_distill.loop import student_location

    run = RunFolder(student_location(run_dir))
    if run.kind() != "dir":
        raise UserError(f"config.students_from: {run.location} is not a folder (a boltz_distill run folder)")
    return [
        trial.name
        for trial in run.read_trials()
        if trial.finished and any(run.kind(f"{trial.name}/{c}/{STATE_FILE}") == "file" for c in trial.checkpoints)
    ]


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.students", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", help="a finished boltz_distill run folder")
    return p


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from trainers.boltz_distill.loop import load_student, student_location

    names = run_students(args.run_dir)
    if not names:
        raise UserError(
            f"{args.run_dir}: no finished trial with a boltz_distill checkpoint (a checkpoint folder with state.pt)"
        )
    for name in names:
        state = load_student(student_location(args.run_dir, name))[1]
        cfg = state["config"]
        print(
            f"{name}: teachers {'+'.join(cfg.get('teachers', []))}, layer {cfg.get('boltz2_layer')}, "
            f"width {cfg.get('width')}, depth {cfg.get('depth')}, lr {cfg.get('lr')}, seed {cfg.get('seed')}, "
            f"probed: step {state['probed_step']}"
        )
    print(f"\noverrides: config.students_from={args.run_dir} 'search.student_trial={json.dumps(names)}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
