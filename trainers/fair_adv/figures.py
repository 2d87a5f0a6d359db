"""The fair_adv report: per-class clean and robust accuracy bars per method, worst-class robust
accuracy against epochs (last and best-so-far), and the final table."""

from raylab.report_spec import Bars, Curve, Report, Table

CIFAR10_CLASSES = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

REPORT = Report(items=(
    Bars("eval/robust_acc_per_class", labels=CIFAR10_CLASSES,
         title="per-class robust accuracy (PGD) at the last epoch"),
    Bars("eval/clean_acc_per_class", labels=CIFAR10_CLASSES,
         title="per-class clean accuracy at the last epoch"),
    Curve(("eval/robust_acc_worst_class", "best/robust_acc_worst_class"), x="train/epoch",
          title="worst-class robust accuracy against epochs: last and at the best validation epoch"),
    Curve(("eval/clean_acc", "eval/robust_acc"), x="train/epoch",
          title="clean and robust accuracy (average over classes) against epochs"),
    Table(("eval/robust_acc_worst_class", "best/robust_acc_worst_class", "eval/robust_acc",
           "eval/clean_acc", "eval/clean_acc_worst_class", "final/cw_acc_worst_class",
           "final/autoattack_acc_worst_class"), best="max",
          title="last epoch, best validation epoch and final attacks (CW, AutoAttack)"),
))
