"""The seagram report: the headline table (MAP under the original and the true labels, labels
kept, solver calls by stage, unconstrained greedy included), the victim's MAP against the
edge-flip budget per attack, the active-learning comparison (labels kept and MAP against the
training solver calls, per al_strategy), and the victims' training curves."""

from raylab.report.spec import Bars, Curve, Report, Table, Versus

REPORT = Report(items=(
    Table(("victim/map", "attack/map", "attack/map_true_labels", "attack/label_preserved",
           "attack/flips_mean", "attack/solver_calls_labels", "attack/solver_calls_train",
           "attack/solver_calls_test"),
          title="headline: clean MAP, MAP after the attack under the original labels and under the "
                "labels the solver gives afterwards, labels kept, flips, and solver calls behind the "
                "labels used / in training / at attack time (greedy_free: no label check)"),
    Versus("al_budget", ("attack/label_preserved", "attack/map"), by=("al_strategy",),
           title="active learning against passive sampling: labels kept and MAP after SEAGRAM "
                 "against the training solver calls (al_budget), per al_strategy"),
    Versus("budget", ("victim/map", "attack/map"), by=("attack",), together=True,
           title="victim MAP before (victim/map) and after the attack against the edge-flip budget"),
    Bars(("attack/solver_calls_labels", "attack/solver_calls_train", "attack/solver_calls_test"),
         by=("attack",),
         title="subgraph-isomorphism solver calls per attack: behind the test labels it conditions "
               "on (made at data generation), training the attack, attacking the test queries"),
    Bars(("attack/label_preserved", "attack/label_preserved_pos", "attack/label_preserved_neg"), by=("attack",),
         title="fraction of attacked pairs whose true label is preserved (all, positive, negative)"),
    Curve(("victim/loss", "victim/map_val"), x="victim/step", by=("victim",),
          title="victim training loss and validation MAP against steps"),
    Table("attack/map", rows="victim", columns=("attack", "budget"), best="min",
          title="victim MAP after the attack (lower: a stronger attack; read with labels kept)"),
))
