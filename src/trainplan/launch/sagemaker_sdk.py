"""The SageMaker SDK v3 side of `launch sagemaker`: SDK objects, the offline request, the submit.

Only this module imports `sagemaker` and `boto3`, and only inside functions, so trainplan imports
without the `sagemaker` extra.

`capture_request` runs the SDK's own ModelTrainer.train() with a boto3 session whose every client
is wrapped in botocore's Stubber: nothing can reach the network, the SDK builds the
CreateTrainingJob request exactly as it would for a real submit, botocore validates it against
the service model while the call is made, and the stub hands back a fake job. The SDK's S3 upload
of the code is replaced by the URI it would return, and its telemetry is switched off through the
SDK config (TelemetryOptOut). The real submit runs the same code with the same config, so the dry
run and the submit build the same request; they differ only in the SDK's IAM role check, which
needs IAM and runs at submit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.launch.base import Rendered
from trainplan.launch.sagemaker import SDK_EXTRA

# An explicit SDK config for the Session (instead of one loaded from ~/.config/sagemaker): telemetry off.
SDK_CONFIG = {"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}
_FAKE_ARN = "arn:aws:sagemaker:{region}:000000000000:training-job/{name}"


def require_sdk() -> None:
    try:
        import sagemaker.train  # noqa: F401
        from sagemaker.core.training import configs  # noqa: F401
    except ImportError:
        raise TrainplanError(SDK_EXTRA) from None


@contextmanager
def staged_source(rendered: Rendered):
    """A directory with what the job runs: trainplan's source, the plan, requirements, entry."""
    import trainplan

    with tempfile.TemporaryDirectory(prefix="trainplan-sm-") as tmp:
        root = Path(tmp) / "code"
        shutil.copytree(Path(trainplan.__file__).parent, root / "trainplan",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name, text in rendered.files.items():
            (root / name).write_text(text)
        yield str(root)


class _HyperparametersAreRead:
    """The SDK warns that hyperparameters are not passed as arguments in `command` mode and may be
    read from SM_HPS: the job's entry reads them from there by design (launch/sagemaker_entry.py),
    so the warning would only mislead."""

    @staticmethod
    def filter(record) -> bool:
        return "not passed as command-line arguments" not in record.getMessage()


@contextmanager
def _quiet_sdk():
    import logging

    log, f = logging.getLogger("sagemaker.core.utils.utils"), _HyperparametersAreRead()
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)


def build_trainer(rendered: Rendered, source_dir: str, session):
    """The ModelTrainer for a rendered job (SDK objects from plain data)."""
    from sagemaker.core.shapes import InstancePlacementConfig, PlacementSpecification
    from sagemaker.core.training.configs import (
        CheckpointConfig,
        Compute,
        InputData,
        OutputDataConfig,
        SourceCode,
        StoppingCondition,
        Tag,
    )
    from sagemaker.train.model_trainer import ModelTrainer

    t = rendered.request
    compute = dict(t["compute"])
    if "instance_placement_config" in compute:
        p = compute["instance_placement_config"]
        compute["instance_placement_config"] = InstancePlacementConfig(
            enable_multiple_jobs=p["enable_multiple_jobs"],
            placement_specifications=[PlacementSpecification(**s) for s in p["placement_specifications"]])
    return ModelTrainer(
        sagemaker_session=session,
        role=t["role"],
        base_job_name=t["base_job_name"],
        training_image=t["training_image"],
        source_code=SourceCode(source_dir=source_dir, **{k: v for k, v in t["source_code"].items()
                                                         if k != "source_dir"}),
        compute=Compute(**compute),
        hyperparameters=dict(t["hyperparameters"]),
        environment=dict(t["environment"]),
        input_data_config=[InputData(**c) for c in t["input_data"]] or None,
        checkpoint_config=CheckpointConfig(**t["checkpoint_config"]),
        stopping_condition=StoppingCondition(**t["stopping_condition"]),
        output_data_config=OutputDataConfig(**t["output_data_config"]),
        tags=[Tag(**tag) for tag in t["tags"]],
    )


def _session(boto_session, bucket: str):
    from sagemaker.core.helper.session_helper import Session

    return Session(boto_session=boto_session, default_bucket=bucket or None, sagemaker_config=SDK_CONFIG)


def _bucket(rendered: Rendered) -> str:
    return rendered.request["output_data_config"]["s3_output_path"].removeprefix("s3://").split("/")[0]


class _StubbedBotoSession:
    """Factory for a boto3 session whose clients all answer from a Stubber (never the network)."""

    def __init__(self, region: str):
        import boto3

        # Placeholder credentials so botocore never searches the machine (or IMDS) for real ones;
        # they are never sent anywhere.
        self.session = boto3.Session(region_name=region, aws_access_key_id="trainplan-dry-run",
                                     aws_secret_access_key="trainplan-dry-run")
        self.stubbers = {}
        self.captured: list[dict] = []
        create = self.session.client

        def client(service_name, *args, **kwargs):
            from botocore.stub import Stubber

            c = create(service_name, *args, **kwargs)
            stub = Stubber(c)
            stub.activate()
            self.stubbers.setdefault(service_name, []).append(stub)
            if service_name == "sagemaker":
                c.meta.events.register("before-parameter-build.sagemaker.CreateTrainingJob", self._record,
                                      unique_id="trainplan-capture")
                self._queue_training_job(stub, region)
            return c

        self.session.client = client

    def _record(self, params, **_):
        self.captured.append(params)

    @staticmethod
    def _queue_training_job(stub, region: str) -> None:
        from botocore.stub import ANY

        name = "captured"
        stub.add_response("create_training_job",
                          {"TrainingJobArn": _FAKE_ARN.format(region=region, name=name)}, None)
        # The SDK reads the job back after creating it.
        stub.add_response("describe_training_job", {
            "TrainingJobName": name, "TrainingJobArn": _FAKE_ARN.format(region=region, name=name),
            "ModelArtifacts": {"S3ModelArtifacts": "s3://dry-run/model.tar.gz"},
            "TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting",
            "AlgorithmSpecification": {"TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceCount": 1, "VolumeSizeInGB": 1},
            "StoppingCondition": {}, "CreationTime": 0,
        }, {"TrainingJobName": ANY})


def capture_request(rendered: Rendered) -> dict:
    """The CreateTrainingJob request the SDK would send for `rendered`, built offline and checked
    against the API schema.

    The job name carries the SDK's timestamp suffix, and the code channels point where the SDK
    would have uploaded them.
    """
    request, _ = capture(rendered)
    problems = check_against_service_model(request)
    if problems:
        raise TrainplanError(f"CreateTrainingJob request does not match the API schema: {problems[0]}")
    return request


def capture(rendered: Rendered) -> tuple[dict, dict[str, dict[str, str]]]:
    """(CreateTrainingJob api_params, {S3 URI: {file: text}} of what the SDK would upload).

    The uploads hold the SDK's own driver configuration (distributed.json, sourcecode.json,
    sm_train.sh), so a test can see the torchrun settings the container will read.
    """
    require_sdk()
    t = rendered.request
    fake = _StubbedBotoSession(t["region"])
    session = _session(fake.session, _bucket(rendered))
    session._default_bucket = _bucket(rendered)  # skip the bucket-exists check (an S3 call)
    uploads: dict[str, dict[str, str]] = {}

    def upload_data(path, bucket=None, key_prefix="data", **_):
        # What Session.upload_data returns for a directory, without uploading.
        uri = f"s3://{bucket or session.default_bucket()}/{key_prefix}"
        root = Path(path)
        uploads[uri] = {str(f.relative_to(root)): _small_text(f) for f in sorted(root.rglob("*"))
                        if f.is_file()}
        return uri

    session.upload_data = upload_data
    # The SDK checks the role's IAM permissions when the trainer is built (iam calls); offline
    # there is no IAM to ask. SAGEMAKER_VALIDATE_ROLE is the SDK's own switch for that check
    # (sagemaker.core.helper.iam_role_resolver); a real submit keeps it.
    with staged_source(rendered) as src, _environ(SAGEMAKER_VALIDATE_ROLE="false"), _quiet_sdk():
        try:
            trainer = build_trainer(rendered, src, session)
            trainer.train(wait=False, logs=False)
        except Exception as e:  # noqa: BLE001 (the SDK raises many kinds; one line for the user)
            raise TrainplanError(f"the SageMaker SDK refused the job: {_one_line(e)}") from None
    if len(fake.captured) != 1:
        raise TrainplanError("the SageMaker SDK did not build a CreateTrainingJob request")
    return fake.captured[0], uploads


def _small_text(path: Path) -> str:
    """Text of the small config files the SDK writes; a placeholder for everything else."""
    if path.suffix in (".json", ".sh", ".txt", ".py") and path.stat().st_size < 100_000:
        return path.read_text()
    return f"<{path.stat().st_size} bytes>"


@contextmanager
def _environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_against_service_model(request: dict) -> list[str]:
    """Problems of a CreateTrainingJob request against botocore's sagemaker service-2.json:
    botocore's ParamValidator (types, required members, minimums) plus the maximum lengths,
    enums and ranges it leaves to the service."""
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.operation_model("CreateTrainingJob").input_shape
    report = ParamValidator().validate(request, shape)
    problems = [line.strip() for line in report.generate_report().splitlines() if line.strip()]
    _limits(shape, request, "CreateTrainingJob", problems)
    return problems


def _limits(shape, value, where: str, problems: list[str]) -> None:
    meta = shape.metadata
    if shape.type_name == "structure" and isinstance(value, dict):
        for k, v in value.items():
            if k in shape.members:
                _limits(shape.members[k], v, f"{where}.{k}", problems)
    elif shape.type_name == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: {len(value)} items, at most {meta['max']}")
        for i, v in enumerate(value):
            _limits(shape.member, v, f"{where}[{i}]", problems)
    elif shape.type_name == "map" and isinstance(value, dict):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: {len(value)} entries, at most {meta['max']}")
        for k, v in value.items():
            _limits(shape.key, k, f"{where} key {k!r}", problems)
            _limits(shape.value, v, f"{where}[{k!r}]", problems)
    elif shape.type_name == "string" and isinstance(value, str):
        if "max" in meta and len(value) > meta["max"]:
            problems.append(f"{where}: {len(value)} characters, at most {meta['max']}")
        if shape.enum and value not in shape.enum:
            problems.append(f"{where}: {value!r} is not one of the API's values")
    elif shape.type_name in ("integer", "long") and isinstance(value, int) and value > meta.get("max", value):
        problems.append(f"{where}: {value} is above the maximum {meta['max']}")


def submit(rendered: Rendered, boto_session=None) -> str:
    """Create the training job (uploads the code to S3); returns the job name. Credentials come
    from boto3's usual chain (environment, profile, instance role), never from trainplan."""
    require_sdk()
    import boto3

    t = rendered.request
    boto_session = boto_session or boto3.Session(region_name=t["region"])
    session = _session(boto_session, _bucket(rendered))
    with staged_source(rendered) as src, _quiet_sdk():
        try:
            trainer = build_trainer(rendered, src, session)
            trainer.train(wait=False, logs=False)
        except Exception as e:  # noqa: BLE001 (botocore and SDK errors alike; one line)
            raise TrainplanError(f"SageMaker did not start the job: {_one_line(e)}") from None
    job = trainer._latest_training_job  # the SDK's handle on the job it just created
    return job.training_job_name if job is not None else t["base_job_name"]


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__
