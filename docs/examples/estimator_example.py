"""A notebook-style session with trainmon's Estimator (tested by tests/test_estimator.py).

Run it as it is: it writes a tiny training script and a data set into a temporary directory,
trains with metric definitions, reads the final metrics and plots-ready analytics.
"""

import tempfile
import textwrap
from pathlib import Path

from trainmon import Estimator, TrainingJobAnalytics

work = Path(tempfile.mkdtemp())
(work / "data").mkdir()
(work / "data" / "train.csv").write_text("".join(f"{i},{i * 2}\n" for i in range(100)))
(work / "src").mkdir()
(work / "src" / "train.py").write_text(textwrap.dedent("""
    import argparse, os
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    rows = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv")).read().splitlines()
    error = 1.0
    for epoch in range(1, args.epochs + 1):
        error *= 1 - args.lr
        print(f"epoch {epoch}: Train_error={error:.4f}; Valid_error={error * 1.1:.4f}; rows={len(rows)}")
    open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w").write(str(error))
"""))

estimator = Estimator(
    entry_point="train.py",
    source_dir=str(work / "src"),
    role="local",
    instance_count=1,
    instance_type="local",
    hyperparameters={"epochs": 5, "lr": 0.2},
    metric_definitions=[
        {"Name": "train:error", "Regex": "Train_error=(.*?);"},
        {"Name": "validation:error", "Regex": "Valid_error=(.*?);"},
    ],
    base_job_name="example",
)
estimator.fit({"train": str(work / "data")})  # streams the job's status and logs, as the SageMaker SDK does

description = estimator.latest_training_job.describe()
for metric in description["FinalMetricDataList"]:
    print("final", metric["MetricName"], metric["Value"])
print("model", estimator.model_data)

frame = estimator.training_job_analytics.dataframe()  # every raw point: timestamp, metric_name, value
print(frame.groupby("metric_name")["value"].agg(["count", "min", "last"]))
per_minute = TrainingJobAnalytics(estimator.latest_training_job.name, period=60, statistic="Average").dataframe()
print(per_minute)
# In a notebook: frame.pivot_table(index="timestamp", columns="metric_name", values="value").plot()
