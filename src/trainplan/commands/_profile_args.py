"""--profile and --machine: the calibration profile (residual coefficients) and the machine profile
(measured rates, trainplan-machine/1) that plan, estimate, compare and validate price layouts with;
one parse for all of them."""

from __future__ import annotations


def add_profile_arguments(p) -> None:
    p.add_argument("--profile", default=None, help="calibration profile JSON (default: packaged)")
    p.add_argument("--machine", default=None, metavar="PROFILE",
                   help="machine profile JSON (trainplan-machine/1, written by `trainplan probe`) used for its "
                        "GPU type in place of the packaged one; 'none': formulas only, no measured rates")


def load_profiles(profile_path: str | None, machine: str | None):
    """The calibration profile with the machine profile applied (None: the packaged defaults)."""
    from dataclasses import replace

    from trainplan.profile import default_profile, load_profile

    if profile_path is None and machine is None:
        return None
    prof = load_profile(profile_path) if profile_path else default_profile()
    if machine == "none":
        return replace(prof, machines=())
    if machine:
        from trainplan.machine.profile import load_machine

        prof = prof.with_machine(load_machine(machine))
    return prof


def profile_line(profile_path: str, machine: str | None, job) -> str:
    """The line a plan or an estimate priced with --profile prints: what the profile was fitted on
    and its cross-validated error (Profile.describe), naming the job's GPU or model where the fit
    did not cover them. (Without --profile the band line says it is the published runs' error.)"""
    return load_profiles(profile_path, machine).describe((job.cluster.gpu.name,), job.model.name)


def check_machine_gpu(machine: str | None, gpu_names) -> None:
    """A machine profile given for a job on other GPU types would silently do nothing: refuse it.
    `gpu_names`: the GPU type the job runs on, or those of the instances a search may choose."""
    if not machine or machine == "none":
        return
    from trainplan.errors import TrainplanError
    from trainplan.machine.profile import load_machine

    names = sorted({gpu_names} if isinstance(gpu_names, str) else set(gpu_names))
    m = load_machine(machine)
    if m.gpu not in names:
        raise TrainplanError(f"--machine {machine} measures {m.gpu!r}, this job runs on "
                             f"{' or '.join(map(repr, names))}; give a profile of this GPU type "
                             "(or use --instance with its GPU)")
