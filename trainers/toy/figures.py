"""The toy workload's report: loss curves over SGD steps, final error against the learning rate."""

from raylab.report.spec import Curve, Report, Table, Versus

REPORT = Report(
    items=(
        Curve(
            ("train/loss", "eval/mse"),
            x="train/step",
            logy=True,
            title="training loss and held-out MSE against SGD steps",
        ),
        Versus("lr", "eval/mse", logy=True, title="held-out MSE at the end against the learning rate"),
        Table(("eval/mse", "train/loss"), best="min", title="final held-out MSE and training loss"),
    ),
    labels={
        "train/loss": "Training loss",
        "eval/mse": "Held-out MSE",
        "train/step": "SGD step",
        "lr": "Learning rate",
    },
)
