"""The fair_adv report: per-class clean and robust accuracy bars per method, the outlier gate's
per-class fractions, worst-class robust accuracy against epochs (last and best-so-far), and the
final table with the best-minus-last gaps.

Bars are labelled by class index, in the dataset's label order (CIFAR-10: plane, car, bird,
cat, deer, dog, frog, horse, ship, truck; CIFAR-100: its fine labels), so one declaration is
right for both datasets."""

from raylab.report_spec import Bars, Curve, Report, Table

REPORT = Report(items=(
    Bars("eval/robust_acc_per_class",
         title="per-class robust accuracy (PGD) at the last epoch, by class index"),
    Bars("eval/clean_acc_per_class", title="per-class clean accuracy at the last epoch, by class index"),
    Bars("regime/outlier_frac_per_class",
         title="fraction of each class's training visits the outlier gate flags (last epoch)"),
    Curve(("eval/robust_acc_worst_class", "best/robust_acc_worst_class"), x="train/epoch",
          title="worst-class robust accuracy against epochs: last and at the best validation epoch"),
    Curve(("eval/clean_acc", "eval/robust_acc"), x="train/epoch",
          title="clean and robust accuracy (average over classes) against epochs"),
    Table(("best/val_robust_acc_worst_class", "eval/robust_acc_worst_class",
           "best/robust_acc_worst_class", "best/robust_acc_worst_class_gap", "best/robust_acc_gap",
           "eval/robust_acc", "eval/clean_acc", "eval/clean_acc_worst_class",
           "final/cw_acc_worst_class", "final/autoattack_acc_worst_class"), best="max",
          title="last epoch, best validation epoch (and best-minus-last gaps) and final attacks (CW, AutoAttack)"),
))
