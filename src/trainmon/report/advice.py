"""What each built-in rule checks and what to do when it fires, in the report's words (pure).

The Rules Summary shows, per rule, what it watches and a recommendation: the first thing worth
trying when it found issues. Rules trainmon does not know get a general line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    checks: str  # what must hold, after "Checks that"
    recommendation: str  # what to try when it does not


ADVICE: dict[str, Advice] = {
    # -- metric rules
    "LossNotDecreasing": Advice(
        "the training loss falls by at least diff_percent every num_steps steps",
        "Look at the learning rate first: too high makes the loss bounce, too low makes it crawl. Check that the "
        "labels match the inputs and that the optimizer updates the parameters you expect; if the loss has simply "
        "converged, stop earlier and save the time."),
    "Overfit": Advice(
        "the validation loss stays within ratio_threshold of the training loss",
        "The model learns the training set rather than the task: add regularization (weight decay, dropout), "
        "augment the data or get more of it, use a smaller model, or stop at the epoch where the two losses "
        "parted."),
    "Overtraining": Advice(
        "the training and validation losses keep improving by delta",
        "Further epochs buy nothing: stop early (keep the checkpoint of the best validation loss), or lower the "
        "learning rate on a plateau if you expect more."),
    "ExplodingTensor": Advice(
        "no watched value is NaN or infinite",
        "Values blew up: lower the learning rate, clip gradients, look for a division by zero or the log of zero "
        "in the loss, and in mixed precision use loss scaling. The first step with a NaN is the one to reproduce."),
    "StalledTrainingRule": Advice(
        "each host prints something at least every threshold seconds",
        "A host went silent: look for a deadlock (distributed collectives waiting for a host that died, data "
        "loader workers that hang), a stuck download, or a job that buffers its output (print with flush=True)."),
    # -- profiler rules
    "CPUBottleneck": Advice(
        "the GPUs are not left idle while the CPU is busy",
        "The GPUs wait for the CPU: use more data loader workers, move preprocessing (decoding, augmentation) "
        "off the training loop or onto the GPU, prefetch batches, and store data in a format that is cheap to "
        "decode."),
    "IOBottleneck": Advice(
        "the GPUs are not left idle while the CPU waits for I/O",
        "The GPUs wait for storage: read larger files sequentially (shard small files into records), prefetch and "
        "cache the data set locally, or use faster storage or more parallel reads."),
    "LowGPUUtilization": Advice(
        "each GPU's p95 utilization is above threshold_p95, without dropping below threshold_p5",
        "The GPUs are underused or fluctuate: raise the batch size, overlap data loading with compute (more "
        "workers, pinned memory, prefetching), or use a smaller instance with fewer GPUs."),
    "GPUMemoryIncrease": Advice(
        "GPU memory does not grow by more than increase percent over a moving window",
        "GPU memory keeps growing: look for tensors kept across steps (losses accumulated with their graph, lists "
        "of outputs), or caches that never shrink; it ends in an out-of-memory error."),
    "LoadBalancing": Advice(
        "the GPUs of a host are used alike",
        "Work is unevenly spread over the GPUs: with data parallelism make sure every GPU gets a share of each "
        "batch (DistributedDataParallel rather than DataParallel), and balance the stages of a pipeline."),
    "BatchSize": Advice(
        "CPU, GPU and GPU memory are not all underused",
        "Every resource is underused: raise the batch size (scaling the learning rate with it), or choose a "
        "smaller instance."),
    "MaxInitializationTime": Advice(
        "the first step comes within threshold minutes of the start",
        "The job takes long to start training: download or unpack the data once (or stream it), keep start-up "
        "work out of the loop's first step, and check what the job did before its first step in its log."),
    "StepOutlier": Advice(
        "no step takes more than stddev standard deviations longer than the mean",
        "Some steps are much slower than the rest: look for checkpoints or evaluation written inside the loop, "
        "garbage collection, data loader stalls, or another process competing for the machine at those times."),
    "Dataloader": Advice(
        "the number of data loader processes suits the cores",
        "Set the data loader's worker count near the number of cores: too few starve the GPUs, too many compete "
        "for the CPU and memory."),
    "OverallSystemUsage": Advice("the system usage per host is summarised (it never fires)",
                                 "Nothing to do: read its figures in its status."),
    "ProfilerReport": Advice(
        "the profiler rules run and this report is written",
        "See the rules it runs, below, for what each found."),
    # -- tensor rules
    "VanishingGradient": Advice(
        "the mean absolute gradient stays above threshold",
        "Gradients vanished: use ReLU-like activations rather than saturating ones, initialise with He or Xavier "
        "initialization, add batch or layer normalization or residual connections, and check the learning rate."),
    "WeightUpdateRatio": Advice(
        "each update is neither too small nor too large against its weights",
        "Updates are out of proportion to the weights: too small means a learning rate that is too low (or "
        "frozen layers), too large means it is too high; adjust it, or the optimizer's settings."),
    "AllZero": Advice(
        "no watched tensor is all zeros",
        "A tensor is all zeros: look for dead ReLUs, a layer initialised to zero, a mask that drops everything, or "
        "an input pipeline that yields empty batches."),
    "UnchangedTensor": Advice(
        "the watched tensors change from one saved step to the next",
        "Parameters do not change: check that they are given to the optimizer, that requires_grad is set, that "
        "the learning rate is not zero and that the loss depends on them."),
}

GENERAL = Advice("its own condition holds (a rule this report does not describe)",
                 "See the rule's status details and findings for what it found.")


def advice(rule: str) -> Advice:
    return ADVICE.get(rule, GENERAL)
