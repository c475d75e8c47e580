"""Pydantic models of everything a user writes, YAML loading and friendly validation errors."""

from servelab.config.loading import apply_overrides, format_validation_error, load_config, load_yaml, validate
from servelab.config.models import (
    Distribution,
    LimitsConfig,
    LoadConfig,
    RunConfig,
    SLOConfig,
    TargetConfig,
    WorkloadConfig,
)

__all__ = [
    "Distribution",
    "LimitsConfig",
    "LoadConfig",
    "RunConfig",
    "SLOConfig",
    "TargetConfig",
    "WorkloadConfig",
    "apply_overrides",
    "format_validation_error",
    "load_config",
    "load_yaml",
    "validate",
]
