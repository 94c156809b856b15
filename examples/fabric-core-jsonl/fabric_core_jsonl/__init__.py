"""An example fabric-core plugin: ``Fabric(loggers="jsonl")`` appends metrics to a JSON-lines file."""
