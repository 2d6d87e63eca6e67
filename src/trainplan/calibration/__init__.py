"""Calibration: the efficiency coefficients of the step-time model (trainplan/profile.py), fitted on
measurements with leave-one-source-out cross-validation and kept as data (trainplan/profiles/*.json).

Calibration sits above the estimate and validation (it fits by predicting records); the profile
type it fits lives below costs, so the cost model never imports calibration."""
