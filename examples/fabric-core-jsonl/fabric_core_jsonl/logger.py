import json
import os

from fabric_core.loggers import Logger
from fabric_core.utilities.rank_zero import rank_zero_only


class JSONLinesLogger(Logger):
    def __init__(self, path="metrics.jsonl"):
        self.path = path

    @property
    def name(self):
        return "jsonl"

    @property
    def version(self):
        return 0

    @rank_zero_only
    def log_metrics(self, metrics, step=None):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")

    def log_hyperparams(self, params, *args, **kwargs):
        self.log_metrics(dict(params))
