"""The DeepSpeed config the strategy builds, validated by DeepSpeed's own parser (no processes)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from deepspeed.runtime.config import DeepSpeedConfig

from fabric_core.errors import InvalidConfigError
from fabric_core_deepspeed import _plugin
from fabric_core_deepspeed.precision import SUPPORTED_PRECISIONS, DeepSpeedPrecision
from fabric_core_deepspeed.strategy import DeepSpeedStrategy

EXPECTED_STAGE = {name: defaults.get("stage", 2) for name, (defaults, _) in _plugin.STRATEGIES.items()}


def parsed(strategy: DeepSpeedStrategy) -> Any:
    """The config as DeepSpeed reads it once the processes are set up (which completes it)."""
    return DeepSpeedConfig(strategy._format_config())


def build(name: str, precision: str = "32-true", **options: Any) -> DeepSpeedStrategy:
    defaults, _ = _plugin.STRATEGIES[name]
    return DeepSpeedStrategy(**{**defaults, **options}, precision=DeepSpeedPrecision(precision))


@pytest.mark.parametrize("precision", SUPPORTED_PRECISIONS)
@pytest.mark.parametrize("name", sorted(_plugin.STRATEGIES))
def test_every_name_and_precision_gives_a_config_deepspeed_accepts(name: str, precision: str) -> None:
    config = parsed(build(name, precision))
    assert config.zero_optimization_stage == EXPECTED_STAGE[name]
    assert config.train_micro_batch_size_per_gpu == 1
    assert config.gradient_clipping == 0.0
    assert config.float16_config.enabled is precision.startswith("16-")
    assert config.bfloat16_config.enabled is precision.startswith("bf16-")


@pytest.mark.parametrize("name", sorted(_plugin.STRATEGIES))
def test_offload_names_offload_where_they_say(name: str) -> None:
    zero = parsed(build(name)).zero_config
    optimizer_device = zero.offload_optimizer.device if zero.offload_optimizer is not None else None
    param_device = zero.offload_param.device if zero.offload_param is not None else None
    expected_optimizer = "nvme" if name.endswith("nvme") else "cpu" if "offload" in name else None
    expected_param = expected_optimizer if name.startswith("deepspeed_stage_3_offload") else None
    assert (optimizer_device, param_device) == (expected_optimizer, expected_param)


def test_fp16_loss_scaling_options_reach_the_config() -> None:
    strategy = build(
        "deepspeed", "16-mixed", loss_scale=128, initial_scale_power=8, loss_scale_window=50, hysteresis=3,
        min_loss_scale=2,
    )  # fmt: skip
    fp16 = parsed(strategy).float16_config
    scaling = (fp16.loss_scale, fp16.initial_scale_power, fp16.loss_scale_window, fp16.hysteresis, fp16.min_loss_scale)
    assert scaling == (128, 8, 50, 3, 2)


def test_zero_options_reach_the_config() -> None:
    strategy = build("deepspeed_stage_2", reduce_bucket_size=1000, overlap_comm=False, logging_batch_size_per_gpu=4)
    config = parsed(strategy)
    assert config.zero_config.reduce_bucket_size == 1000
    assert config.zero_config.overlap_comm is False
    assert config.train_micro_batch_size_per_gpu == 4
    assert config.zero_allow_untested_optimizer is True


def test_zero_optimization_off_gives_stage_0() -> None:
    strategy = build("deepspeed", zero_optimization=False)
    assert "zero_optimization" not in strategy.config
    assert parsed(strategy).zero_optimization_stage == 0
    assert strategy.zero_stage == 0 and not strategy.zero_stage_3


def test_a_config_dict_is_copied_and_completed() -> None:
    given = {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.5}
    strategy = DeepSpeedStrategy(config=given, stage=1, precision=DeepSpeedPrecision("bf16-mixed"))
    assert strategy.config == given  # as given until the processes are set up, as in Lightning
    assert strategy._format_config() is strategy.config == {
        "zero_optimization": {"stage": 3}, "gradient_clipping": 0.5, "bf16": {"enabled": True},
        "train_micro_batch_size_per_gpu": 1}  # fmt: skip
    assert given == {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.5}
    assert strategy.zero_stage_3
    assert parsed(strategy).gradient_clipping == 0.5


def test_a_config_with_its_own_batch_size_and_precision_sections_is_kept() -> None:
    given = {"train_batch_size": 4, "bf16": {"enabled": True, "immediate_grad_update": False}}
    strategy = DeepSpeedStrategy(config=given, precision=DeepSpeedPrecision("bf16-true"))
    assert strategy._format_config() == given
    assert parsed(strategy).train_batch_size == 4


def test_a_config_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    assert DeepSpeedStrategy(config=path).zero_stage == 1
    assert DeepSpeedStrategy(config=str(path)).config["zero_optimization"] == {"stage": 1}


def test_the_config_path_can_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    monkeypatch.setenv("FABRIC_CORE_DEEPSPEED_CONFIG_PATH", str(path))
    assert DeepSpeedStrategy().zero_stage == 3


def test_lightnings_config_path_variable_is_honoured_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    monkeypatch.delenv("FABRIC_CORE_DEEPSPEED_CONFIG_PATH", raising=False)
    monkeypatch.setenv("PL_DEEPSPEED_CONFIG_PATH", str(path))
    with caplog.at_level(logging.INFO, logger="fabric_core"):
        strategy = DeepSpeedStrategy()
    assert strategy.zero_stage == 3
    assert DeepSpeedStrategy.DEEPSPEED_ENV_VAR == "PL_DEEPSPEED_CONFIG_PATH"
    assert "Loading DeepSpeed config from set PL_DEEPSPEED_CONFIG_PATH environment variable" in caplog.messages
    lightning_deepspeed = pytest.importorskip("lightning_fabric.strategies.deepspeed")
    assert lightning_deepspeed.DeepSpeedStrategy().config["zero_optimization"] == {"stage": 3}


def test_the_precision_section_is_announced_as_in_lightning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fabric_core"):
        build("deepspeed", "bf16-mixed")._format_config()
        build("deepspeed", "16-mixed")._format_config()
    assert [m for m in caplog.messages if m.startswith("Enabling DeepSpeed")] == [
        "Enabling DeepSpeed BF16. Model parameters and inputs will be cast to `bfloat16`.",
        "Enabling DeepSpeed FP16. Model parameters and inputs will be cast to `float16`.",
    ]


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"the path does not exist: .*missing.json") as missing:
        DeepSpeedStrategy(config=tmp_path / "missing.json")
    assert isinstance(missing.value, FileNotFoundError)
    broken = tmp_path / "broken.json"
    broken.write_text("{stage: 2")
    with pytest.raises(InvalidConfigError, match=r"not valid JSON"):
        DeepSpeedStrategy(config=broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(InvalidConfigError, match=r"holds a list, but a DeepSpeed config is a JSON object"):
        DeepSpeedStrategy(config=listed)


@pytest.mark.parametrize(
    ("config", "precision", "match"),
    [
        ({"fp16": {"enabled": True}}, "bf16-mixed", r"enables 'fp16' but the precision is 'bf16-mixed'"),
        ({"bf16": {"enabled": True}}, "32-true", r"enables 'bf16' but the precision is '32-true'.*bf16-mixed"),
        ({"fp16": {"enabled": True}}, "32-true", r"enables 'fp16'.*precision='16-mixed'"),
    ],
)
def test_a_config_contradicting_the_precision_is_rejected(config: dict[str, Any], precision: str, match: str) -> None:
    strategy = DeepSpeedStrategy(config=config, precision=DeepSpeedPrecision(precision))
    with pytest.raises(InvalidConfigError, match=match):
        strategy._format_config()


def test_a_disabled_half_section_does_not_contradict() -> None:
    strategy = DeepSpeedStrategy(config={"fp16": {"enabled": False}}, precision=DeepSpeedPrecision("bf16-mixed"))
    assert strategy._format_config()["bf16"] == {"enabled": True}


@pytest.mark.parametrize(
    ("option", "value"),
    [("stage", 4), ("offload_optimizer_device", "gpu"), ("offload_params_device", "disk"), ("start_method", "thread")],
)
def test_bad_options_name_the_valid_choices(option: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=rf"DeepSpeedStrategy\({option}={value!r}\).*Valid choices"):
        DeepSpeedStrategy(**{option: value})
