"""Calibration: efficiency coefficients of the step-time model, fitted on measurements with
leave-one-source-out cross-validation, kept as data (profiles/*.json)."""

from trainplan.calibration.profile import Profile, default_profile, load_profile

__all__ = ["Profile", "default_profile", "load_profile"]
