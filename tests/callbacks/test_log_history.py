"""LogHistory: log lines, history.csv / history.jsonl, TensorBoard scalars read back, resume, curves picture,
throughput (samples/s, data wait, peak memory, FLOP/s, MFU).

Most tests read the files of one 3-epoch run: 96 training samples in batches of 16 (6
batches an epoch), a log line every 2 batches, 50 test samples.
"""
import copy
import csv
import json
import logging
import re
import shutil

import pytest
import torch

from basetrainer.callbacks.log_history import LogHistory
from basetrainer.callbacks.losses_recorder import LossesRecorder
from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.engine.events import LOWEST, Callback
from basetrainer.loggers.tensorboard import TensorBoardLogger
from basetrainer.metric.accuracy_recorder import AccuracyRecorder
from basetrainer.utils import plots, throughput
from basetrainer.utils.batch import total_loss
from basetrainer.utils.log import set_logger
from support.toy import Crash
from support.workers.metrics_worker import ClassifierTrainer, cfg, make_model

EPOCHS, STEPS, LOG_FREQ = 3, 6, 2
BATCH_SIZE = 16
# An epoch record's figures that differ between runs.
WALL_CLOCK = ("time_s", "samples_per_s", "peak_memory_gib", "whole_run_samples_per_s", "steady_samples_per_s",
              "whole_run_mfu", "steady_mfu")
# make_model's forward: Linear(8, 16) and Linear(16, 3), 2 FLOPs per multiply-add; training is ~3 forwards.
TRAIN_FLOPS_PER_SAMPLE = 3 * 2 * (8 * 16 + 16 * 3)


class Spy(Callback):
    """Keeps every batch's loss and each epoch's finished logs, as LogHistory should have seen them."""

    priority = LOWEST

    def __init__(self):
        super().__init__()
        self.batch_losses, self.epoch_logs = [], []

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.batch_losses.append(total_loss(losses).item())

    def on_epoch_end(self, epoch, logs):
        self.epoch_logs.append(copy.deepcopy({k: logs[k] for k in ("lr", "train", "test")}))


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines, self.results = [], []

    def emit(self, record):
        self.lines.append(record.getMessage())
        if getattr(record, "result", False):
            self.results.append(record.getMessage())


def train(log_dir, num_epochs=EPOCHS, resume=None, logger=None, spy=None, **history_options):
    def callbacks():
        history = LogHistory(str(log_dir), log_freq=LOG_FREQ, logger=logger, **history_options)
        return [LossesRecorder(), AccuracyRecorder(), history, ModelCheckpoint(model_dir=str(log_dir / "model")),
                *([spy] if spy else [])]

    trainer = ClassifierTrainer(cfg(num_epochs=num_epochs, resume=resume, callbacks=callbacks))
    trainer.run()
    return trainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("run")
    logger = logging.getLogger("test_log_history")
    lines, spy = Lines(), Spy()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        trainer = train(log_dir, logger=logger, spy=spy, indicators=["loss", "Acc"])
    finally:
        logger.removeHandler(lines)
    assert not trainer.model._forward_pre_hooks  # the FLOP counter's hook went with the first batch
    return log_dir, lines, spy


def read_csv(path):
    with open(path, newline="") as stream:
        return list(csv.reader(stream))


def scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


# ---------------------------------------------------------------------- CSV and JSON lines
def test_csv_columns_follow_the_indicators(run):
    log_dir, _, _ = run
    assert read_csv(log_dir / "history.csv")[0] == ["epoch", "lr", "train_loss", "train_Acc", "test_loss", "test_Acc"]


def test_csv_has_one_row_per_epoch_with_the_published_values(run):
    log_dir, _, spy = run
    rows = read_csv(log_dir / "history.csv")[1:]
    expected = [[str(e), repr(logs["lr"]), repr(logs["train"]["loss"]), repr(logs["train"]["Acc"]),
                 repr(logs["test"]["loss"]), repr(logs["test"]["Acc"])] for e, logs in enumerate(spy.epoch_logs, 1)]
    assert rows == expected


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_wall_clock(records):
    return [{key: value for key, value in record.items() if key not in WALL_CLOCK} for record in records]


def test_jsonl_has_each_epochs_logs(run):
    log_dir, _, spy = run
    records = read_jsonl(log_dir / "history.jsonl")
    assert without_wall_clock(records) == [{"epoch": e, **logs} for e, logs in enumerate(spy.epoch_logs, 1)]


def test_each_epoch_record_has_the_training_time_so_far_the_epochs_samples_per_second_and_peak_memory(run):
    log_dir, _, _ = run
    records = read_jsonl(log_dir / "history.jsonl")
    times = [record["time_s"] for record in records]
    assert 0 < times[0] < times[1] < times[2]
    # the epoch's training batches take part of its time (its evaluation the rest)
    epoch_seconds = [later - earlier for earlier, later in zip([0, *times], times)]
    training_seconds = [STEPS * BATCH_SIZE / record["samples_per_s"] for record in records]
    assert all(0 < training <= epoch for training, epoch in zip(training_seconds, epoch_seconds))
    assert all(record["peak_memory_gib"] > 0 for record in records)


def test_without_indicators_the_columns_are_the_first_epochs_numbers_in_order(tmp_path):
    history = LogHistory(str(tmp_path), tensorboard=False, plot=False)
    history.on_train_begin({})
    for epoch, extra in ((0, {}), (1, {"late": 1.0})):
        logs = {"lr": 0.1, "train": {"loss": {"cls": 1.0, "box": 2.0, "total_loss": 3.0}, "Acc": 50.0, **extra},
                "test": {"Acc": 40.0, "name": "not a number"}}
        history.on_epoch_begin(epoch, logs)
        history.on_epoch_end(epoch, logs)
    table = read_csv(tmp_path / "history.csv")
    assert table[0] == ["epoch", "lr", "train_loss/cls", "train_loss/box", "train_loss/total_loss", "train_Acc",
                        "test_Acc"]
    assert table[2] == ["2", "0.1", "1.0", "2.0", "3.0", "50.0", "40.0"]
    assert json.loads((tmp_path / "history.jsonl").read_text().splitlines()[1])["train"]["late"] == 1.0


# ---------------------------------------------------------------------- log lines
def test_a_line_every_log_freq_batches_with_the_window_mean_loss(run):
    _, lines, spy = run
    step_lines = [line for line in lines.lines if " iter " in line]
    assert len(step_lines) == EPOCHS * STEPS // LOG_FREQ
    first = step_lines[0].split()
    assert first[:4] == ["epoch", "1/3", "iter", "2/6"]
    fields = dict(zip(first[4::2], first[5::2]))
    assert fields["loss"] == f"{sum(spy.batch_losses[:LOG_FREQ]) / LOG_FREQ:.4f}"
    assert fields["lr"] == "0.05"
    assert float(fields["samples/s"]) > 0 and fields["data"].endswith("%") and ":" in fields["eta"]
    assert fields["mem"].endswith("GiB") and float(fields["mem"][:-3]) > 0
    assert fields["FLOP/s"][-1] in "kMGT" and "MFU" not in fields  # no known peak on a CPU


def test_flops_per_second_are_the_models_training_flops_per_sample_times_samples_per_second(run):
    log_dir, _, _ = run
    values = scalars(log_dir)
    speeds = [value for _, value in values["train/samples_per_s"]]
    flops = [value for _, value in values["train/flops_per_s"]]
    assert [f / s for f, s in zip(flops, speeds)] == pytest.approx([TRAIN_FLOPS_PER_SAMPLE] * len(speeds), rel=1e-5)


def test_peak_memory_is_the_process_peak_resident_set_on_cpu(run):
    log_dir, _, _ = run
    import resource

    peaks = [value for _, value in scalars(log_dir)["train/peak_memory_gib"]]
    assert peaks == sorted(peaks) and 0 < peaks[-1] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def test_data_wait_is_a_share_of_the_time(run):
    log_dir, _, _ = run
    assert all(0 <= value <= 1 for _, value in scalars(log_dir)["train/data_wait"])


def test_mfu_is_the_flops_share_of_the_devices_peak(tmp_path, monkeypatch):
    monkeypatch.setattr(throughput, "peak_flops", lambda device, amp: 1e9)  # as if the CPU were a known GPU
    train(tmp_path, num_epochs=1, plot=False)
    values = scalars(tmp_path)
    expected = [flops / 1e9 for _, flops in values["train/flops_per_s"]]
    assert [mfu for _, mfu in values["train/mfu"]] == pytest.approx(expected, rel=1e-5)


def test_the_history_and_the_closing_line_give_the_mfu_of_both_rates(tmp_path, monkeypatch):
    monkeypatch.setattr(throughput, "peak_flops", lambda device, amp: 1e3)  # MFUs of the order of 100x, to be read
    logger, lines = logging.getLogger("test_log_history.mfu"), Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        train(tmp_path, num_epochs=2, plot=False, logger=logger)  # 12 batches: 2 in steady state
    finally:
        logger.removeHandler(lines)
    last = read_jsonl(tmp_path / "history.jsonl")[-1]
    for kind in ("whole_run", "steady"):
        assert last[f"{kind}_mfu"] == pytest.approx(TRAIN_FLOPS_PER_SAMPLE * last[f"{kind}_samples_per_s"] / 1e3)
    closing = re.search(r"samples/s (\d+) over the whole run .* \| MFU ([\d.]+)% over the whole run, ([\d.]+)% in "
                        r"steady state$", lines.results[-1])
    assert float(closing[2]) == pytest.approx(100 * TRAIN_FLOPS_PER_SAMPLE * int(closing[1]) / 1e3, rel=0.01)
    assert float(closing[3]) == pytest.approx(100 * last["steady_mfu"], abs=0.05)  # no batch after the last epoch


def test_an_epoch_summary_line_with_train_and_test_values(run):
    _, lines, spy = run
    summaries = [line for line in lines.lines if " done in " in line]
    assert len(summaries) == EPOCHS
    assert summaries[-1].startswith("epoch 3/3 done in ")
    assert f"test loss {spy.epoch_logs[-1]['test']['loss']:.5g} Acc {spy.epoch_logs[-1]['test']['Acc']:.5g}" \
        in summaries[-1]


def test_epoch_summaries_and_the_closing_line_are_results_and_step_lines_are_not(run):
    _, lines, _ = run
    assert lines.results == [line for line in lines.lines if " done in " in line or line.startswith("trained ")]


def test_the_closing_line_gives_the_whole_runs_rate_and_the_steady_one_named_as_such(run):
    _, lines, _ = run
    closing = lines.results[-1]
    assert closing.startswith(f"trained {EPOCHS * STEPS * 16} samples in 0:00:")
    assert " over the whole run (start-up excluded; compilation, evaluations, checkpoints included), " in closing
    assert closing.endswith(" in steady state (after the first 10 batches, evaluations left out)")


def test_the_history_has_the_runs_rates_so_far_the_steady_one_once_past_the_first_10_batches(run):
    log_dir, _, _ = run
    records = read_jsonl(log_dir / "history.jsonl")
    assert [sorted(key for key in record if key.endswith("samples_per_s")) for record in records] == [
        ["samples_per_s", "whole_run_samples_per_s"],  # 6 batches: no steady state yet
        ["samples_per_s", "steady_samples_per_s", "whole_run_samples_per_s"],
        ["samples_per_s", "steady_samples_per_s", "whole_run_samples_per_s"]]
    assert all(record["steady_samples_per_s"] > record["whole_run_samples_per_s"] for record in records[1:])


def test_results_go_to_stdout_and_progress_to_stderr(tmp_path, capsys):
    set_logger("info")
    train(tmp_path, num_epochs=1, plot=False, tensorboard=False)
    out, err = capsys.readouterr()
    assert "done in" in out and "done in" not in err
    assert " iter " in err and " iter " not in out


# ---------------------------------------------------------------------- TensorBoard
def test_tensorboard_has_the_step_and_epoch_tags(run):
    log_dir, _, _ = run
    assert set(scalars(log_dir)) == {"train/loss_step", "train/lr", "train/samples_per_s", "train/data_wait",
                                     "train/peak_memory_gib", "train/flops_per_s",
                                     "train/loss", "train/Acc", "test/loss", "test/Acc", "lr",
                                     "train/whole_run_samples_per_s", "train/steady_samples_per_s"}


def test_step_scalars_are_at_the_global_batch_every_log_freq(run):
    log_dir, _, spy = run
    loss_steps = scalars(log_dir)["train/loss_step"]
    assert [step for step, _ in loss_steps] == list(range(LOG_FREQ - 1, EPOCHS * STEPS, LOG_FREQ))
    assert loss_steps[0][1] == pytest.approx(sum(spy.batch_losses[:LOG_FREQ]) / LOG_FREQ, rel=1e-6)


def test_epoch_scalars_hold_the_published_values_at_each_epochs_last_batch(run):
    log_dir, _, spy = run
    values = scalars(log_dir)
    for tag in ("train/loss", "train/Acc", "test/loss", "test/Acc"):
        phase, name = tag.split("/")
        expected = [((e + 1) * STEPS - 1, pytest.approx(logs[phase][name], rel=1e-6))
                    for e, logs in enumerate(spy.epoch_logs)]
        assert values[tag] == expected, tag


class HandOvers(Callback):
    """Records, for each event the SummaryWriter is given and each flush, the epoch and batch training was at."""

    def __init__(self, monkeypatch):
        super().__init__()
        from torch.utils.tensorboard.writer import FileWriter, SummaryWriter

        self.calls, self.flushes, original, flush = [], [], FileWriter.add_summary, SummaryWriter.flush

        def add_summary(writer, summary, global_step=None, walltime=None):
            self.calls.append((self.state.epoch, self.state.batch, summary.value[0].tag, walltime))
            return original(writer, summary, global_step, walltime)

        def record_flush(writer):
            self.flushes.append(self.state.epoch)
            return flush(writer)

        monkeypatch.setattr(FileWriter, "add_summary", add_summary)
        monkeypatch.setattr(SummaryWriter, "flush", record_flush)


def test_step_scalars_reach_the_writer_in_one_batch_at_the_epoch_end(tmp_path, monkeypatch):
    spy = HandOvers(monkeypatch)
    train(tmp_path / "log", num_epochs=2, spy=spy)
    step_events = [(epoch, batch) for epoch, batch, tag, _ in spy.calls if tag == "train/loss_step"]
    assert step_events == [(epoch, STEPS - 1) for epoch in range(2) for _ in range(STEPS // LOG_FREQ)]
    times = [walltime for *_, walltime in spy.calls]
    assert None not in times and times == sorted(times)  # each stamped with the time it was logged
    assert [step for step, _ in scalars(tmp_path / "log")["train/loss_step"]] == list(range(LOG_FREQ - 1, 2 * STEPS, LOG_FREQ))


def test_step_scalars_older_than_the_hand_over_limit_go_to_the_writer_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(TensorBoardLogger, "HAND_OVER_SECS", 0.0)
    spy = HandOvers(monkeypatch)
    train(tmp_path / "log", num_epochs=1, spy=spy)
    step_events = [batch for _, batch, tag, _ in spy.calls if tag == "train/loss_step"]
    assert step_events == list(range(LOG_FREQ - 1, STEPS, LOG_FREQ))


@pytest.mark.parametrize("flush_secs, flushed_at", [(1000.0, [0]), (0.0, [0, 1, 2])])
def test_epoch_ends_flush_tensorboard_at_most_every_flush_secs(tmp_path, monkeypatch, flush_secs, flushed_at):
    monkeypatch.setattr(TensorBoardLogger, "FLUSH_SECS", flush_secs)
    spy = HandOvers(monkeypatch)
    train(tmp_path / "log", num_epochs=3, spy=spy)
    assert spy.flushes == flushed_at
    epochs = [step for step, _ in scalars(tmp_path / "log")["train/loss"]]  # all there once training ended
    assert epochs == [STEPS - 1, 2 * STEPS - 1, 3 * STEPS - 1]


def test_step_scalars_logged_before_a_crash_reach_tensorboard(tmp_path):
    with pytest.raises(RuntimeError, match="crash"):
        train(tmp_path / "log", num_epochs=2, spy=Crash(batch=4, epoch=1, error=RuntimeError("crash")))
    steps = [step for step, _ in scalars(tmp_path / "log")["train/loss_step"]]
    assert steps == [1, 3, 5, STEPS + 1, STEPS + 3]  # epoch 1's two lines were still queued at the crash


# ---------------------------------------------------------------------- pictures and ranks
def test_training_curves_png_at_the_end(run):
    log_dir, _, _ = run
    assert (log_dir / "training_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_the_curves_of_one_epoch_have_an_integer_tick_and_a_visible_point():
    figure = plots.training_curves_figure([{"epoch": 1, "lr": 0.1, "train_loss": 1.0, "test_loss": 1.2}])
    for ax in (ax for ax in figure.axes if ax.get_visible()):
        low, high = ax.get_xlim()
        assert [tick for tick in ax.get_xticks() if low <= tick <= high] == [1.0], ax.get_title()
        assert all(line.get_marker() == "o" and line.get_markersize() >= 6 for line in ax.lines)


def test_the_curves_x_axis_counts_epochs_from_1(run):
    log_dir, _, _ = run
    rows = [dict(zip(read_csv(log_dir / "history.csv")[0], row)) for row in read_csv(log_dir / "history.csv")[1:]]
    figure = plots.training_curves_figure([{k: float(v) for k, v in row.items()} for row in rows])
    assert list(figure.axes[0].lines[0].get_xdata()) == [1.0, 2.0, 3.0]


def test_a_process_that_is_not_main_writes_nothing(tmp_path):
    logger = logging.getLogger("test_log_history.silent")
    lines = Lines()
    logger.addHandler(lines)
    try:
        train(tmp_path / "logs", num_epochs=1, logger=logger, is_main_process=False)
    finally:
        logger.removeHandler(lines)
    assert lines.lines == []
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["model"]


# ---------------------------------------------------------------------- resume
def test_resumed_history_equals_an_uninterrupted_one(run, tmp_path):
    uninterrupted, _, _ = run
    resumed = tmp_path / "resumed"
    train(resumed, num_epochs=2, indicators=["loss", "Acc"])
    shutil.copy(resumed / "model" / "last.pth", tmp_path / "after_epoch_2.pth")
    train(resumed, num_epochs=3, resume="auto", indicators=["loss", "Acc"])
    # Resume once more from the older checkpoint: epoch 2's rows are written again, not twice.
    train(resumed, num_epochs=3, resume=str(tmp_path / "after_epoch_2.pth"), indicators=["loss", "Acc"])
    assert (resumed / "history.csv").read_text() == (uninterrupted / "history.csv").read_text()
    resumed_records = read_jsonl(resumed / "history.jsonl")
    assert without_wall_clock(resumed_records) == without_wall_clock(read_jsonl(uninterrupted / "history.jsonl"))
    times = [record["time_s"] for record in resumed_records]
    assert times == sorted(times)  # the resumed run's time goes on from the epochs it kept
    test_acc = scalars(resumed)["test/Acc"]
    assert test_acc == scalars(uninterrupted)["test/Acc"]


def test_a_fresh_run_replaces_an_old_history_in_the_same_folder(tmp_path):
    train(tmp_path, num_epochs=2, plot=False, tensorboard=False)
    train(tmp_path, num_epochs=1, plot=False, tensorboard=False)
    assert [row[0] for row in read_csv(tmp_path / "history.csv")[1:]] == ["1"]
    assert len((tmp_path / "history.jsonl").read_text().splitlines()) == 1


def test_state_holds_the_history_so_a_new_folder_gets_it_all(tmp_path):
    train(tmp_path / "a", num_epochs=2, tensorboard=False, plot=False)
    state = torch.load(tmp_path / "a" / "model" / "last.pth", weights_only=True)
    history = LogHistory(str(tmp_path / "b"), tensorboard=False, plot=False)
    history.load_state_dict(next(v for k, v in state["callbacks"].items() if k.endswith("LogHistory")))
    history.on_train_begin({"epoch": 2})
    assert (tmp_path / "b" / "history.csv").read_text() == (tmp_path / "a" / "history.csv").read_text()


def test_a_state_saved_with_epochs_from_0_is_renumbered_from_1(tmp_path):
    old_state = {"history": [{"epoch": 0, "lr": 0.1, "train": {"loss": 1.0}, "test": {}}],
                 "columns": ["epoch", "lr", "train_loss"]}
    history = LogHistory(str(tmp_path), tensorboard=False, plot=False)
    history.load_state_dict(old_state)
    history.on_train_begin({"epoch": 1})
    assert read_csv(tmp_path / "history.csv") == [["epoch", "lr", "train_loss"], ["1", "0.1", "1.0"]]


# ---------------------------------------------------------------------- FLOPs and peaks
def test_counting_flops_changes_neither_the_models_modes_nor_its_statistics():
    model = make_model()
    model.train()
    model[1].eval()  # a frozen BatchNorm stays frozen, the rest stays in training mode
    counter = throughput.ForwardFlops(model, model)
    model(torch.randn(4, 8))
    running_mean = model[1].running_mean.clone()
    assert counter.count() == TRAIN_FLOPS_PER_SAMPLE / 3
    assert [m.training for m in model.modules()] == [True, True, False, True, True]
    assert torch.equal(model[1].running_mean, running_mean) and not model._forward_pre_hooks


def test_a_model_the_counter_cannot_follow_counts_as_none():
    class NeedsGradients(torch.nn.Linear):
        def forward(self, x):
            if not torch.is_grad_enabled():
                raise RuntimeError("this model only runs with gradients")
            return super().forward(x)

    model = NeedsGradients(8, 3)
    counter = throughput.ForwardFlops(model, model)
    model(torch.randn(2, 8))
    assert counter.count() is None and model.training


@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("NVIDIA H100 PCIe", "bf16", 756.0), ("NVIDIA H200", "fp16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156.0), ("NVIDIA L4", "fp32", 30.3), ("NVIDIA L40S", "bf16", 362.1),
    ("Tesla T4", "bf16", None), ("NVIDIA A10G", "bf16", None), ("NVIDIA GeForce RTX 4090", "bf16", None)])
def test_gpu_peaks_by_device_name_and_precision(name, precision, tflops):
    peak = throughput.gpu_peak_flops(name, precision)
    assert peak == (tflops * 1e12 if tflops else None)


def test_a_cpu_has_no_known_peak():
    assert throughput.peak_flops(torch.device("cpu")) is None
