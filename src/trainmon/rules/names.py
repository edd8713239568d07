"""What SageMaker calls the rules and where their configurations go (pure constants).

The two request fields a rule configuration is an entry of (:data:`DEBUG`, :data:`PROFILER`),
Debugger's built-in rules of each kind by name, and the names a job's loss and step metrics go by,
which a rule reads by default when its configuration names none. Every module of the rules reads
these: the configurations from Python (:mod:`.configs`), the ones read and checked (:mod:`.catalog`,
:mod:`.profiler_setup`).
"""

from __future__ import annotations

DEBUG, PROFILER = "DebugRuleConfigurations", "ProfilerRuleConfigurations"

TENSOR_RULES = ("VanishingGradient", "ExplodingTensor", "WeightUpdateRatio", "AllZero", "UnchangedTensor", "DeadRelu",
                "PoorWeightInitialization", "SaturatedActivation", "ClassImbalance", "SimilarAcrossRuns",
                "TensorVariance", "CheckInputImages", "NLPSequenceRatio", "Confusion", "FeatureImportanceOverweight",
                "TreeDepth", "CreateXgboostReport")
PROFILER_RULES = ("ProfilerReport", "BatchSize", "CPUBottleneck", "Dataloader", "GPUMemoryIncrease", "IOBottleneck",
                  "LoadBalancing", "LowGPUUtilization", "MaxInitializationTime", "OverallSystemUsage",
                  "OverallFrameworkMetrics", "StepOutlier")

TRAINING_LOSS_NAMES = ("train:loss", "training:loss", "train_loss", "training_loss", "train-loss", "train/loss",
                       "loss", "train:objective_loss", "objective_loss")
VALIDATION_LOSS_NAMES = ("validation:loss", "val:loss", "valid:loss", "validation_loss", "val_loss", "valid_loss",
                         "validation-loss", "val-loss", "validation/loss", "val/loss", "eval:loss", "eval_loss",
                         "validation:objective_loss")
STEP_NAMES = ("step", "global_step", "steps", "train:step", "training:step", "iteration", "iter", "batch",
              "batch_idx")
"""The names (any case) a step metric goes by, in the order they are looked for among the job's definitions."""
