from fabric_core.plugin_api import hookimpl


@hookimpl
def fabric_core_register_loggers(registry):
    registry.add(
        "jsonl",
        "fabric_core_jsonl.logger:JSONLinesLogger",
        description="Appends every logged metric dict to metrics.jsonl.",
    )
