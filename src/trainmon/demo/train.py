"""A small real training job: logistic regression with numpy, trained by mini-batch gradient descent.

It reads the SageMaker container contract (hyperparameters.json, the train/validation channels,
SM_MODEL_DIR) and prints what real training scripts print: a progress bar redrawn with '\r',
'Train_error=...; Valid_error=...;' lines, an XGBoost-style tab-separated evaluation line and a
warning on stderr.
"""

import json
import os
import sys
import time

import numpy as np


def load(channel: str) -> tuple[np.ndarray, np.ndarray]:
    directory = os.environ[f"SM_CHANNEL_{channel.upper()}"]
    data = np.loadtxt(os.path.join(directory, f"{channel}.csv"), delimiter=",")
    return data[:, 1:], data[:, 0]


def main() -> None:
    config_dir = os.environ["SM_INPUT_CONFIG_DIR"]
    with open(os.path.join(config_dir, "hyperparameters.json")) as f:
        hp = json.load(f)  # every value is a string, as SageMaker writes them
    epochs, lr, batch = int(hp.get("epochs", "12")), float(hp.get("learning_rate", "0.5")), int(hp.get("batch_size", "64"))
    x_train, y_train = load("train")
    x_valid, y_valid = load("validation")
    print(f"Training on {len(y_train)} rows, validating on {len(y_valid)} ({os.environ['SM_CURRENT_HOST']})")
    rng = np.random.default_rng(0)
    w, b = np.zeros(x_train.shape[1]), 0.0

    def predict(x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(x @ w + b)))

    steps = max(1, len(y_train) // batch)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(y_train))
        for step in range(steps):
            index = order[step * batch:(step + 1) * batch]
            p = predict(x_train[index])
            grad = p - y_train[index]
            w -= lr * x_train[index].T @ grad / len(index)
            b -= lr * grad.mean()
            if step % max(1, steps // 5) == 0 or step == steps - 1:
                done = (step + 1) * 100 // steps
                bar = "#" * (done // 10) + "." * (10 - done // 10)
                print(f"\repoch {epoch}/{epochs} [{bar}] {done:3d}%", end="", flush=True)
                time.sleep(0.05)
        print()
        p_train, p_valid = predict(x_train), predict(x_valid)
        loss = float(-np.mean(y_train * np.log(p_train + 1e-12) + (1 - y_train) * np.log(1 - p_train + 1e-12)))
        train_error = float(np.mean((p_train > 0.5) != y_train))
        valid_error = float(np.mean((p_valid > 0.5) != y_valid))
        print(f"epoch={epoch} Train_error={train_error:.4f}; Valid_error={valid_error:.4f}; loss={loss:.5f}")
        rmse_t = float(np.sqrt(np.mean((p_train - y_train) ** 2)))
        rmse_v = float(np.sqrt(np.mean((p_valid - y_valid) ** 2)))
        print(f"[{epoch - 1}]\ttrain-rmse:{rmse_t:.5f}\tvalidation-rmse:{rmse_v:.5f}")
        if epoch == epochs // 2:
            print("warning: learning rate schedule not set; using a constant rate", file=sys.stderr)
    np.savez(os.path.join(os.environ["SM_MODEL_DIR"], "model.npz"), w=w, b=b)
    print("Model saved.")


if __name__ == "__main__":
    main()
