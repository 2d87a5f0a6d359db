"""The seagram report: the victim's MAP against the edge-flip budget per attack (clean and after
the attack), solver calls per attack, label preservation, and the victims' training curves."""

from raylab.report_spec import Bars, Curve, Report, Table, Versus

REPORT = Report(items=(
    Versus("budget", ("victim/map", "attack/map"), by=("attack",), together=True,
           title="victim MAP before (victim/map) and after the attack against the edge-flip budget"),
    Bars(("attack/solver_calls_train", "attack/solver_calls_test"), by=("attack",),
         title="subgraph-isomorphism solver calls per attack (training the attack, attacking the test queries)"),
    Bars(("attack/label_preserved", "attack/label_preserved_pos", "attack/label_preserved_neg"), by=("attack",),
         title="fraction of attacked pairs whose true label is preserved (all, positive, negative)"),
    Curve(("victim/loss", "victim/map_val"), x="victim/step", by=("victim",),
          title="victim training loss and validation MAP against steps"),
    Table("attack/map", rows="victim", columns=("attack", "budget"), best="min",
          title="victim MAP after the attack (lower: a stronger attack)"),
    Table(("victim/map", "attack/map", "attack/map_drop", "attack/label_preserved", "attack/flips_mean",
           "attack/solver_calls_train", "attack/solver_calls_test"),
          title="clean and attacked MAP, label preservation, flips and solver calls"),
))
