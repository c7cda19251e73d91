"""Notebook 01's measuring helpers, run for real on the CPU: the clock that waits for the device, the
matrix product's GFLOP/s, the speed chart and its alt text, the copy speed and its table."""
import pytest
import torch

from support.notebook_code import load_helpers

nb = load_helpers("01")


def test_synchronized_clock_waits_for_the_device_before_each_reading(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)  # what synchronize(device) calls
    clock = nb.synchronized_clock("cuda")
    first, second = clock(), clock()
    assert waited == [torch.device("cuda")] * 2 and second >= first


def test_matmul_speed_on_the_cpu_is_measured_for_real():
    gflops = nb.matmul_gflops("cpu", 64, 0.02)
    assert 0.01 < gflops < 1e5  # 2 × 64³ FLOPs per product; a CPU core does 1 to 1,000 GFLOP/s


@pytest.mark.parametrize("speed", [{"cpu": 87.654}, {"cpu": 87.654, "cuda": 7123.4}])
def test_speed_chart_has_a_bar_per_device_labelled_on_a_log_scale(speed):
    import matplotlib.pyplot as plt
    figure = nb.speed_chart(speed)
    try:
        [axes] = figure.axes
        assert len(axes.patches) == len(speed)
        assert [label.get_text() for label in axes.get_yticklabels()] == list(speed)
        assert [text.get_text() for text in axes.texts] == [f"{value:,.0f}" for value in speed.values()]
        assert axes.get_xscale() == "log" and "GFLOP/s" in axes.get_xlabel()
        assert axes.get_title() and axes.get_ylabel()
        low, high = axes.get_xlim()
        assert low < min(speed.values()) and high > max(speed.values())
    finally:
        plt.close(figure)


def test_a_copy_on_the_cpu_is_measured_for_real():
    gbps = nb.copy_gbps(torch.ones(1 << 18), torch.device("cpu"), 0.02)  # 1 MiB of float32
    assert 0.01 < gbps < 1e4


def test_the_copy_table_is_rounded():
    copies = nb.copy_table({"pinned CPU memory -> GPU": 12.345678}, 256)
    assert copies.iloc[0, 0] == 12.3 and copies.index.name == "copy of 256 MB"


def test_the_charts_alt_text_says_each_bar_in_words():
    assert nb.speed_words({"cpu": 87.654, "cuda": 7123.4}) == "cpu 88 GFLOP/s, cuda 7,123 GFLOP/s"
