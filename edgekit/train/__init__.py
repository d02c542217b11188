"""`edgekit train-demo`: ``stage`` retrains the built-in demo models and saves their weights,
``render`` shows what it trained. The training recipes themselves live with the models
(``edgekit.models.train``)."""

from edgekit.train.stage import DEMO_MODELS, TrainDemoConfig, train_demo

__all__ = ["DEMO_MODELS", "TrainDemoConfig", "train_demo"]
