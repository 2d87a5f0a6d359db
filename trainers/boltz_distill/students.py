"""``python -m trainers.boltz_distill.students RUN``: the trained students of a boltz_distill run.

Lists the trial folders of a finished ``boltz_distill`` run that hold a student checkpoint
(``checkpoint_*/state.pt``), with each one's teachers, layer, width, depth, lr and seed, and
prints the ``admet_probe`` overrides that probe every one of them (one trial per student and
split seed, so one table row per student)::

    python -m raylab.tune admet_probe config.features=student config.students_from=RUN \\
        'search.student_trial=[TRIAL_A, TRIAL_B]' 'search.variant=[{features: student, probe: mlp}]'
"""

from __future__ import annotations

import argparse
import json
import sys

from raylab.errors import UserError, exit_on_user_error
from raylab.files import user_path
from raylab.run_folder import RunFolder


def run_students(run_dir: str) -> list[str]:
    """Names of the trial folders of ``run_dir`` with a student checkpoint, sorted."""
    root = user_path(run_dir)
    if not root.is_dir():
        raise UserError(f"config.students_from: {root} is not a folder (a boltz_distill run folder)")
    run = RunFolder(root)
    return [
        name
        for name, kind in run.listdir()
        if kind == "dir" and any(c.joinpath("state.pt").is_file() for c in run.trial(name).checkpoint_paths())
    ]


@exit_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers.boltz_distill.students", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", help="a finished boltz_distill run folder")
    args = p.parse_args(argv)
    from trainers.boltz_distill.loop import load_student

    names = run_students(args.run_dir)
    if not names:
        raise UserError(
            f"{args.run_dir}: no trial folder with a boltz_distill checkpoint (a checkpoint folder with state.pt)"
        )
    for name in names:
        cfg = load_student(user_path(args.run_dir) / name)[1]["config"]
        print(
            f"{name}: teachers {'+'.join(cfg.get('teachers', []))}, layer {cfg.get('boltz2_layer')}, "
            f"width {cfg.get('width')}, depth {cfg.get('depth')}, lr {cfg.get('lr')}, seed {cfg.get('seed')}"
        )
    print(f"\noverrides: config.students_from={args.run_dir} 'search.student_trial={json.dumps(names)}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
