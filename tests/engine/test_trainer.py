"""The training loop: hooks, events, losses, accumulation, clipping, AMP, NaN handling, host syncs."""
import collections

import pytest
import torch
import torch.nn as nn

from basetrainer.engine.events import Callback
from basetrainer.engine.run_summary import RunSummary
from basetrainer.errors import ConfigError, NonFiniteLossError
from basetrainer.utils.batch import move_to_device
from support.processes import run_python
from support.toy import Crash, EventLog, ToyTrainer, toy_cfg


def weights(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def assert_same_weights(a, b, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=1e-5, msg=f"{k} differs")


def test_build_calls_the_six_hooks_in_order():
    trainer = ToyTrainer(toy_cfg())
    assert trainer.calls == ["build_train_loader", "build_test_loader", "build_model", "build_criterion",
                             "build_optimizer", "build_callbacks"]


def test_build_fills_step_and_sample_counts():
    trainer = ToyTrainer(toy_cfg(train_size=128, batch_size=16, test_size=50))
    assert (trainer.num_steps, trainer.num_samples, trainer.train_num, trainer.test_num) == (8, 128, 128, 50)


def test_build_drops_none_callbacks():
    log = EventLog()
    trainer = ToyTrainer(toy_cfg(callbacks=[None, log, None]))
    assert [callback for callback in trainer.callbacks if not isinstance(callback, RunSummary)] == [log]


def test_a_subclass_that_only_fills_the_hooks_trains_and_its_loss_falls():
    losses = []

    class Record(Callback):
        def on_train_summary(self, inputs, outputs, loss, epoch, batch, logs):
            losses.append(float(loss.detach()))

    ToyTrainer(toy_cfg(num_epochs=5, callbacks=[Record()])).run()
    per_epoch = [sum(losses[i:i + 8]) / 8 for i in range(0, len(losses), 8)]
    assert per_epoch[-1] < 0.7 * per_epoch[0]


def test_callback_events_fire_in_the_documented_order():
    log = EventLog()
    ToyTrainer(toy_cfg(num_epochs=1, train_size=32, batch_size=16, test_size=20, callbacks=[log])).run()
    assert log.events == [
        ("on_train_begin",),
        ("on_epoch_begin", 0),
        ("on_batch_begin", 0), ("on_train_summary", 0, 0), ("on_batch_end", 0),
        ("on_batch_begin", 1), ("on_train_summary", 0, 1), ("on_batch_end", 1),
        ("on_test_begin",),
        ("on_test_summary", 0, 0), ("on_test_summary", 0, 1),
        ("on_test_end",),
        ("on_epoch_end", 0),
        ("on_train_end",),
    ]


def test_an_error_fires_on_exception_instead_of_the_remaining_events_and_propagates():
    log = EventLog()
    with pytest.raises(RuntimeError, match="boom"):
        ToyTrainer(toy_cfg(num_epochs=2, train_size=48, batch_size=16, callbacks=[log, Crash(batch=1)])).run()
    assert log.events[-3:] == [("on_train_summary", 0, 1), ("on_batch_end", 1), ("on_exception", "RuntimeError")]


def test_an_on_exception_handler_that_fails_is_logged_and_the_original_error_still_propagates(caplog):
    class Clumsy(Callback):
        def on_exception(self, error, logs):
            raise ValueError("clumsy")

    log = EventLog()
    with pytest.raises(RuntimeError, match="boom"):
        ToyTrainer(toy_cfg(num_epochs=1, callbacks=[Clumsy(), log, Crash(batch=0)])).run()
    assert log.events[-1] == ("on_exception", "RuntimeError")  # the callbacks after the clumsy one ran too
    assert "Clumsy.on_exception failed while training stopped on RuntimeError" in caplog.text


def test_test_events_fire_even_without_a_test_loader():
    log = EventLog()
    ToyTrainer(toy_cfg(num_epochs=1, train_size=16, batch_size=16, test_size=0, callbacks=[log])).run()
    names = [e[0] for e in log.events]
    assert names[names.index("on_batch_end") + 1:] == ["on_test_begin", "on_test_end", "on_epoch_end", "on_train_end"]


def test_callbacks_run_by_priority_then_in_list_order():
    order = []

    def make(name, priority):
        class Named(Callback):
            def on_epoch_end(self, epoch, logs):
                order.append(name)
        cb = Named()
        cb.priority = priority
        return cb

    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[make("late", 90), make("a", 50), make("early", 10),
                                                 make("b", 50)])).run()
    assert order == ["early", "a", "b", "late"]


def test_each_run_gets_a_fresh_logs_dict():
    trainer = ToyTrainer(toy_cfg(num_epochs=1))
    shared = {}
    first, second = trainer.run(shared), trainer.run(shared)
    assert first is not second and first is not shared and shared == {}


def test_dict_losses_are_summed_for_backward_and_each_term_reaches_callbacks():
    seen = []

    class Keys(Callback):
        def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
            seen.append(sorted(losses))

    ce = nn.CrossEntropyLoss()
    as_dict = ToyTrainer(toy_cfg(num_epochs=1, lr=0.1, callbacks=[Keys()],
                                 loss=lambda out, y: {"ce": ce(out, y), "ce_again": ce(out, y)}))
    doubled_lr = ToyTrainer(toy_cfg(num_epochs=1, lr=0.2))
    as_dict.run()
    doubled_lr.run()
    assert seen[0] == ["ce", "ce_again"]
    assert_same_weights(weights(as_dict), weights(doubled_lr))


def test_list_losses_are_summed_for_backward():
    ce = nn.CrossEntropyLoss()
    as_list = ToyTrainer(toy_cfg(num_epochs=1, lr=0.1, loss=lambda out, y: [ce(out, y), ce(out, y)]))
    doubled_lr = ToyTrainer(toy_cfg(num_epochs=1, lr=0.2))
    as_list.run()
    doubled_lr.run()
    assert_same_weights(weights(as_list), weights(doubled_lr))


def test_accumulating_4_batches_of_8_equals_one_batch_of_32():
    accumulated = ToyTrainer(toy_cfg(num_epochs=1, train_size=32, batch_size=8, shuffle=False,
                                     accumulate_grad_batches=4))
    whole = ToyTrainer(toy_cfg(num_epochs=1, train_size=32, batch_size=32, shuffle=False))
    accumulated.run()
    whole.run()
    assert accumulated.iteration == whole.iteration == 1
    assert_same_weights(weights(accumulated), weights(whole))


def test_a_short_last_accumulation_window_averages_over_its_own_batches():
    trainer = ToyTrainer(toy_cfg(num_epochs=1, train_size=40, batch_size=8, shuffle=False,
                                 accumulate_grad_batches=4))
    reference = ToyTrainer(toy_cfg(num_epochs=1, train_size=40, batch_size=8, shuffle=False))
    x, y = reference.train_loader.dataset.tensors
    model, opt, ce = reference.model, reference.optimizer, nn.CrossEntropyLoss()
    for chunk in (slice(0, 32), slice(32, 40)):  # one step on 4 batches, one on the last batch alone
        opt.zero_grad()
        ce(model(x[chunk]), y[chunk]).backward()
        opt.step()
    trainer.run()
    assert trainer.iteration == 2
    assert_same_weights(weights(trainer), weights(reference))


def test_clip_grad_norm_caps_the_gradient_norm():
    def update_norm(clip):
        trainer = ToyTrainer(toy_cfg(num_epochs=1, train_size=16, batch_size=16, lr=1.0, clip_grad_norm=clip,
                                     loss=lambda out, y: 1000.0 * nn.functional.cross_entropy(out, y)))
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.run()
        deltas = [p.detach() - b for p, b in zip(trainer.model.parameters(), before)]
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(d) for d in deltas])).item()

    assert update_norm(0.5) == pytest.approx(0.5, rel=1e-4)  # SGD, lr 1: the update is the clipped gradient
    assert update_norm(0.0) > 10.0


def test_logs_lr_is_the_lr_each_step_used():
    from basetrainer.scheduler.build_scheduler import get_scheduler

    seen = []

    class Lr(Callback):
        def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
            seen.append(logs["lr"])

    class Scheduled(ToyTrainer):
        def build_callbacks(self, cfg):
            return [get_scheduler("multi-step", self.optimizer, 0.1, 2, self.num_steps, milestones=[1]), Lr()]

    Scheduled(toy_cfg(num_epochs=2, train_size=32, batch_size=16, lr=0.1)).run()
    assert seen == pytest.approx([0.1, 0.1, 0.01, 0.01])


def test_bf16_autocast_runs_on_cpu():
    dtypes = []

    class Dtype(Callback):
        def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
            dtypes.append(outputs.dtype)

    logs = ToyTrainer(toy_cfg(num_epochs=1, amp="bf16", callbacks=[Dtype()])).run()
    assert set(dtypes) == {torch.bfloat16}
    assert logs["epoch"] == 0


@pytest.mark.slow
def test_compile_trains_to_the_same_weights_as_eager():
    eager = ToyTrainer(toy_cfg(num_epochs=1))
    compiled = ToyTrainer(toy_cfg(num_epochs=1, compile=True))
    eager.run()
    compiled.run()
    assert_same_weights(weights(eager), weights(compiled), atol=1e-5)


def test_an_unknown_amp_value_is_a_config_error():
    with pytest.raises(ConfigError, match="config key 'amp' expects one of none, bf16, fp16, true, got str 'fp8'"):
        ToyTrainer(toy_cfg(amp="fp8"))


def nan_at(epoch_batch, batches_per_epoch=8):
    ce = nn.CrossEntropyLoss()
    calls = collections.Counter()

    def loss(out, y):
        if torch.is_grad_enabled():
            step = calls["train"]
            calls["train"] += 1
            if divmod(step, batches_per_epoch) == epoch_batch:
                return ce(out, y) * float("nan")
        return ce(out, y)

    return loss


def test_a_nan_loss_stops_training_with_an_error_naming_the_epoch_and_batch():
    trainer = ToyTrainer(toy_cfg(num_epochs=3, loss=nan_at((1, 3))))  # 0-based (epoch, batch): named from 1
    with pytest.raises(NonFiniteLossError, match=r"the loss is nan at epoch 2, batch 4: .*nonfinite_loss: skip"):
        trainer.run()


def test_nonfinite_loss_skip_drops_only_the_bad_step():
    trainer = ToyTrainer(toy_cfg(num_epochs=2, loss=nan_at((1, 3)), nonfinite_loss="skip"))
    trainer.run()
    assert trainer.skipped_steps == 1 and trainer.iteration == 15
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_nonfinite_loss_ignore_trains_on_without_checking(monkeypatch):
    checks = []
    isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda tensor: checks.append(tensor) or isfinite(tensor))
    trainer = ToyTrainer(toy_cfg(num_epochs=2, loss=nan_at((1, 3)), nonfinite_loss="ignore"))
    trainer.run()  # as a bare PyTorch loop would: no error, and the NaN reaches the weights
    monkeypatch.undo()
    assert trainer.iteration == 16 and trainer.skipped_steps == 0
    assert not all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert checks == []  # no loss was ever checked


class BatchLossSpy(Callback):
    """The loss and size of every training batch, read per step (what the tally saves callbacks doing)."""

    def __init__(self):
        super().__init__()
        self.losses, self.sizes, self.tallies = [], [], []

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.losses.append(self.trainer.loss.item())
        self.sizes.append(len(inputs[0]))

    def on_epoch_end(self, epoch, logs):
        loss_sum, weighted_sum, batches, samples = self.trainer.loss_tally.totals()
        self.tallies.append((loss_sum.item(), weighted_sum.item(), batches, samples))


def test_the_loss_tally_sums_the_epochs_batch_losses_and_sizes():
    from basetrainer.callbacks.losses_recorder import LossesRecorder

    spy = BatchLossSpy()
    trainer = ToyTrainer(toy_cfg(num_epochs=1, train_size=100, batch_size=16, drop_last=False,
                                 nonfinite_check_every=3, callbacks=[spy, LossesRecorder()]))
    logs = trainer.run()
    (loss_sum, weighted_sum, batches, samples), = spy.tallies
    assert batches == len(spy.losses) == 7 and samples == sum(spy.sizes) == 100  # a short last batch of 4
    assert loss_sum == pytest.approx(sum(spy.losses), rel=1e-6)
    assert weighted_sum == pytest.approx(sum(l * n for l, n in zip(spy.losses, spy.sizes)), rel=1e-6)
    assert logs["train"]["loss"] == pytest.approx(weighted_sum / 100, rel=1e-12)  # LossesRecorder reads it


def test_skipped_steps_count_nowhere_in_the_loss_tally():
    spy = BatchLossSpy()
    trainer = ToyTrainer(toy_cfg(num_epochs=1, loss=nan_at((0, 3)), nonfinite_loss="skip", callbacks=[spy]))
    trainer.run()
    loss_sum, _, batches, _ = spy.tallies[0]
    assert trainer.skipped_steps == 1 and batches == 7
    assert loss_sum == pytest.approx(sum(v for v in spy.losses if v == v), rel=1e-6)


def test_a_callback_that_declines_an_event_is_never_called_there():
    class Declines(EventLog):
        def handles(self, event):
            return event != "on_batch_end" and super().handles(event)

    log = Declines()
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[log])).run()
    events = [event[0] for event in log.events]
    assert "on_batch_end" not in events and events.count("on_train_summary") == 8


def test_test_and_train_summaries_see_the_batch_as_to_device_moved_it():
    """A callback sees the moved batch in both phases: on a GPU the evaluation's targets must sit beside
    its outputs (before, on_test_summary got the loader's CPU batch and AccuracyRecorder failed on CUDA)."""
    class Marked(ToyTrainer):
        def to_device(self, inputs):
            return inputs if len(inputs) == 3 else (*inputs, "moved")

        def run_step(self, inputs):
            x, y, mark = inputs
            assert mark == "moved"
            outputs = self.model(x)
            return outputs, self.criterion(outputs, y)

    class Seen(Callback):
        def __init__(self):
            super().__init__()
            self.marks = collections.Counter()

        def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
            self.marks["train", inputs[-1]] += 1

        def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
            self.marks["test", inputs[-1]] += 1

    seen = Seen()
    Marked(toy_cfg(num_epochs=1, callbacks=[seen])).run()
    assert seen.marks == {("train", "moved"): 8, ("test", "moved"): 4}


def test_an_unknown_nonfinite_loss_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="config key 'nonfinite_loss' expects one of raise, skip, ignore, got str 'warn'"):
        ToyTrainer(toy_cfg(nonfinite_loss="warn"))


def test_the_loop_makes_no_host_sync_per_step(monkeypatch):
    syncs = collections.Counter()
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):
            syncs[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)

    def syncs_for(train_size):
        syncs.clear()
        ToyTrainer(toy_cfg(num_epochs=2, train_size=train_size, batch_size=16, test_size=0,
                           nonfinite_check_every=1000)).run()
        return sum(syncs.values())

    assert syncs_for(64) == syncs_for(512) <= 3 * 2  # a few per epoch (sampler, loader seed, NaN check), none per step


def test_the_progress_bar_shows_on_the_main_process_only(monkeypatch, capsys):
    ToyTrainer(toy_cfg(num_epochs=1, progress=True)).run()
    assert "Train epoch 1/1" in capsys.readouterr().err
    monkeypatch.setattr("basetrainer.engine.progress.comm.is_main_process", lambda: False)
    ToyTrainer(toy_cfg(num_epochs=1, progress=True)).run()
    assert capsys.readouterr().err == ""


def test_progress_false_shows_no_bar(capsys):
    ToyTrainer(toy_cfg(num_epochs=1, progress=False)).run()
    assert "Train epoch" not in capsys.readouterr().err


def test_the_progress_bar_shows_loss_lr_and_throughput(capsys):
    ToyTrainer(toy_cfg(num_epochs=1, progress=True)).run()
    err = capsys.readouterr().err
    assert "loss=" in err and "lr=0.1" in err and "samples_s=" in err


def test_the_progress_bar_ends_each_epoch_at_its_total_and_shows_the_epochs_mean_loss(capsys):
    spy = BatchLossSpy()
    ToyTrainer(toy_cfg(num_epochs=2, progress=True, train_size=400, callbacks=[spy])).run()
    err = capsys.readouterr().err
    final = [line for line in err.replace("\r", "\n").splitlines() if "Train epoch 2/2" in line][-1]
    assert "25/25" in final  # advanced in jumps, but it ends at the total
    assert f"loss={sum(spy.losses[25:]) / 25:.4g}" in final


def test_batches_move_to_the_device_whatever_their_structure():
    Pair = collections.namedtuple("Pair", "image label")
    batch = {"a": [torch.zeros(2, 3, 4, 4), (torch.ones(2),)], "b": Pair(torch.zeros(1), 3), "c": "name"}
    moved = move_to_device(batch, torch.device("cpu"), channels_last=True)
    assert isinstance(moved["b"], Pair) and moved["b"].label == 3 and moved["c"] == "name"
    assert moved["a"][0].is_contiguous(memory_format=torch.channels_last)
    assert isinstance(moved["a"][1], tuple)


@pytest.mark.slow
def test_importing_basetrainer_prints_nothing_and_loads_no_torchvision():
    code = "import sys, basetrainer; assert basetrainer.__version__; print('torchvision' in sys.modules)"
    result = run_python(["-c", code], check=True, fresh=True)
    assert (result.stdout, result.stderr) == ("False\n", "")
