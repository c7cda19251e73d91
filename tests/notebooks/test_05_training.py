"""Notebook 05's training step, run for real on the CPU for every variant PyTorch lets a CPU run: float16
with a GradScaler (torch.amp.GradScaler("cpu") and torch.autocast("cpu", float16)), an overflowing
float16 step, bfloat16 autocast, channels_last, the fused optimizer, Adam's default form, torch.compile
with aot_eager, CUDA graphs' step marks (with a stand-in torch.compile), and measure_setting training
every variant and checking, as the notebook only prints, that each keeps the results. Each test says
what only a GPU can show."""
import math

import pytest
import torch

from support.notebook_05 import TINY, mixed, tiny_job, tiny_run, weights
from support.notebook_05 import one_thread, shapes_module  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers

nb = load_helpers("05")


def test_float16_with_a_grad_scaler_really_steps_and_updates_the_scale():
    # The notebook's T4 path (float16 + GradScaler) with PyTorch's CPU scaler and CPU autocast.
    # Only a GPU shows the speed of float16 Tensor Cores; a CPU shows that the step is right.
    run = tiny_run(nb, mixed(nb, torch.float16, True))
    assert run.step is nb.mixed_precision_step and run.scaler.is_enabled()
    seen = []
    run.model[0].register_forward_hook(lambda layer, inputs, output: seen.append(output.dtype))
    before = weights(run)
    for _ in range(3):
        run.step(run)
    assert seen == [torch.float16] * 3  # the convolution really computed in float16
    assert run.scaler.get_scale() == 2.0**16 and run.scaler._get_growth_tracker() == 3  # 3 good steps
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(run)))  # the optimizer stepped
    assert all(parameter.dtype == torch.float32 for parameter in run.model.parameters())


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # the skipped step
def test_an_overflowing_float16_step_is_skipped_and_the_scale_backs_off():
    run = tiny_run(nb, mixed(nb, torch.float16, True))
    run.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # float16 gradients overflow
    before = weights(run)
    run.step(run)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(run)))  # found_inf: step skipped
    assert run.scaler.get_scale() == 2.0**39 and run.scaler._get_growth_tracker() == 0
    run.step(run)
    assert run.scaler.get_scale() < 2.0**39 or any(not torch.equal(a, b)
                                                    for a, b in zip(before, weights(run)))


def test_bfloat16_autocast_computes_the_convolutions_in_bfloat16_and_keeps_float32_weights():
    # Only a GPU with fast bfloat16 (capability 8.0+) shows the speed-up; a CPU runs the same step.
    run = tiny_run(nb, mixed(nb, torch.bfloat16, False))
    assert not run.scaler.is_enabled()  # a pass-through: scale() returns the loss as it is
    seen = []
    run.model[0].register_forward_hook(lambda layer, inputs, output: seen.append(output.dtype))
    before = weights(run)
    run.step(run)
    assert seen == [torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in run.model.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(run)))


def test_channels_last_reaches_the_first_convolution_and_changes_no_result():
    # On a GPU with Tensor Cores the layout saves conversions; a CPU checks the plumbing and results.
    plain, last = tiny_run(nb, {}), tiny_run(nb, {"channels_last": True})
    seen = []
    last.model[0].register_forward_hook(
        lambda layer, inputs, output: seen.append(inputs[0].is_contiguous(memory_format=torch.channels_last)))
    for _ in range(3):
        nb.train_step(plain)
        nb.train_step(last)
    assert seen == [True] * 3
    assert torch.allclose(torch.stack(plain.losses), torch.stack(last.losses), atol=1e-5)


def test_the_fused_optimizer_takes_the_same_steps():
    # On a GPU the fused kernel saves launches; on a CPU it is a real fused kernel too.
    plain, fused = tiny_run(nb, {}), tiny_run(nb, {"optimizer": nb.fused_adam})
    assert not plain.optimizer.defaults["fused"] and fused.optimizer.defaults["fused"] is True
    assert plain.optimizer.defaults["lr"] == fused.optimizer.defaults["lr"] == nb.LEARNING_RATE
    for _ in range(5):
        nb.train_step(plain)
        nb.train_step(fused)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(weights(plain), weights(fused)))


def test_the_baseline_adam_is_pytorchs_default_form_and_a_variant_brings_its_own():
    # the default: on a CUDA GPU PyTorch groups the updates ("foreach"); a baseline forced to
    # foreach=False would make fused=True look better than it is
    plain = tiny_run(nb, {})
    assert plain.optimizer.defaults["fused"] is None and plain.optimizer.defaults["foreach"] is None
    made = []
    run = tiny_run(nb, {"optimizer": lambda parameters: made.append(1) or torch.optim.SGD(parameters, lr=0.1)})
    assert made == [1] and isinstance(run.optimizer, torch.optim.SGD)


def test_torch_compile_with_aot_eager_trains_like_eager():
    # Inductor's fused kernels need a compiler (and, on a GPU, Triton); aot_eager runs the same
    # tracing and autograd steps everywhere, so the CPU checks the compiled step's plumbing.
    eager, compiled = tiny_run(nb, {}), tiny_run(nb, {"compile": "aot_eager"})
    assert compiled.forward is not compiled.model
    for _ in range(3):
        nb.train_step(eager)
        nb.train_step(compiled)
    assert torch.allclose(torch.stack(eager.losses), torch.stack(compiled.losses), atol=1e-5)


def test_cuda_graphs_mark_every_step(monkeypatch):
    # Only a CUDA GPU can record and replay a graph; the CPU checks that each training step tells
    # PyTorch so, before the compiled model runs. No compilation here: the graphs need the GPU.
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **options: calls.append(options) or model)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("mark"))
    run = tiny_run(nb, {"compile": "inductor", "mode": "reduce-overhead"})
    assert calls == [{"backend": "inductor", "mode": "reduce-overhead"}]
    run.model.register_forward_pre_hook(lambda module, inputs: calls.append("forward"))
    run.step(run)
    run.step(run)
    assert calls[1:] == ["mark", "forward"] * 2
    calls.clear()
    plain = tiny_run(nb, {"compile": "aot_eager"})
    plain.model.register_forward_pre_hook(lambda module, inputs: calls.append("forward"))
    plain.step(plain)
    assert calls == [{"backend": "aot_eager", "mode": None}, "forward"]


def test_every_variant_a_cpu_can_run_keeps_the_results(shapes_module):
    # The assertion that the notebook only prints (a GPU can drift past it: see the verdict)
    variants = [{"name": "baseline"}, {"name": "Adam(fused=True)", "optimizer": nb.fused_adam},
                {"name": "channels_last", "channels_last": True},
                mixed(nb, torch.bfloat16, False), mixed(nb, torch.float16, True),
                {"name": "torch.compile, backend=aot_eager", "compile": "aot_eager"},
                {"name": "cudnn.benchmark", "cudnn_benchmark": True, "needs": "an NVIDIA GPU"}]
    rows = nb.measure_setting(tiny_job(nb, shapes_module), variants)
    assert [row["variant"] for row in rows] == [variant["name"] for variant in variants]
    assert rows[0]["baseline"] and not any(row.get("baseline") for row in rows[1:])
    assert rows[-1] == {"setting": "tiny", "variant": "cudnn.benchmark", "not_run": "needs an NVIDIA GPU"}
    for row in rows[:-1]:
        assert row["speedup_x"] > 0 and row["slowest_x"] <= row["speedup_x"] <= row["fastest_x"]
        assert row["loss"] < math.log(4) and row["step_ms"] > 0  # it learned something
    checks = nb.check_results(rows)
    assert checks.kept.all(), checks
    table = nb.compare(rows, "tiny")
    assert list(table.index) == [variant["name"] for variant in variants]
    assert list(table.kept) == ["", "yes", "yes", "yes", "yes", "yes", ""]  # the baseline, the not-run


def test_measure_setting_trains_every_step_of_a_variant_with_its_own_training_step(shapes_module):
    # A variant's own step (Going deeper B's mixed_precision_step) must run in the timed rounds, the
    # first step and the steps that finish the run: a train_step there would measure float32 instead.
    taken = []

    def own_step(run, times=None):
        taken.append(run.batch_size)
        nb.train_step(run, times)

    rows = nb.measure_setting(tiny_job(nb, shapes_module), [{"name": "baseline"},
                                                       {"name": "own", "step": own_step}])
    assert len(taken) == TINY["steps"] and "loss" in rows[1]
