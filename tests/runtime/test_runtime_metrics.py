"""Measurements use the planner's field names, units and FLOP convention."""

from dataclasses import fields

import pytest
import torch

from trainplan.costs.flops import model_flops
from trainplan.estimate import estimate
from trainplan.runtime.demo import demo_plan
from trainplan.runtime.metrics import (
    StepRecord,
    flops_per_token,
    local_flops_per_token,
    make_record,
    resume_line,
    steps_ran,
    summarize,
)


def test_flops_per_token_is_the_planners():
    spec = demo_plan(1).job.model
    assert flops_per_token(spec, 128) == model_flops(spec).model_per_token(128)
    assert flops_per_token(spec, 128, causal=False) == model_flops(spec).model_per_token(128, causal=False)
    # The fallback (6N + attention) agrees with the planner to within the norm weights it counts.
    assert local_flops_per_token(spec, 128) == pytest.approx(flops_per_token(spec, 128), rel=0.01)


def test_record_fields_match_the_estimate():
    plan = demo_plan(8)
    est = estimate(plan.job, plan.layout).to_dict()
    shared = {"peak_mem_gib", "step_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "mfu", "mfu_noncausal"}
    assert shared <= set(est)
    assert shared <= {f.name for f in fields(StepRecord)}


def test_make_record_units():
    r = make_record(step=1, loss=2.0, lr=1e-3, grad_norm=1.0, tokens=4096, step_time_s=0.5, world=2,
                    flops_tok=(1e9, 2e9), peak_flops=1e15, device=torch.device("cpu"))
    assert r.tokens_per_s == 8192 and r.tokens_per_s_per_gpu == 4096
    assert r.tflops_per_gpu == pytest.approx(4096 * 1e9 / 1e12)
    assert r.mfu == pytest.approx(4096 * 1e9 / 1e15) and r.mfu_noncausal == pytest.approx(2 * r.mfu)
    assert r.peak_mem_gib is None  # not measured on CPU


def test_summary_skips_warmup_steps_for_timing():
    recs = [{"step": i + 1, "loss": 5.0 - i, "step_time_s": t, "tokens_per_s": 1.0, "mfu": None}
            for i, t in enumerate([9.0, 1.0, 2.0, 3.0])]
    s = summarize(recs, warmup=1)
    assert s["first_loss"] == 5.0 and s["last_loss"] == 2.0 and s["step_time_s"] == 2.0 and s["mfu"] is None


def test_a_resumed_run_counts_the_steps_it_ran_from_the_step_it_resumed_at():
    # the case: resumed at step 10 of 21, 11 steps ran (it used to say "over 21 steps")
    assert steps_ran({"steps": 21, "start_step": 10}) == "11 steps (11-21, resumed at step 10)"
    assert steps_ran({"steps": 10, "start_step": 0}) == "10 steps"
    assert steps_ran({"steps": 4, "start_step": 3}) == "1 step (4-4, resumed at step 3)"


def test_the_resume_announcement_names_the_checkpoint_and_what_is_left():
    assert resume_line("ck/step-00000010", 10, 21) == "resuming from ck/step-00000010 at step 10: steps 11-21 to run"
    assert resume_line("ck/step-00000020", 20, 21).endswith("step 21 to run")
    assert resume_line("ck/step-00000021", 21, 21).endswith("nothing to run before --steps 21")
