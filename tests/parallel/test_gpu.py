"""What only a GPU can show: NCCL, fp16 AMP with GradScaler, DataParallel and channels_last on CUDA.

Every test here is skipped where CUDA is absent (CI has none); run them on a GPU machine
with ``python -m pytest -q tests/test_gpu.py``.
"""
import pytest
import torch
import torch.nn as nn

from basetrainer.engine.events import Callback
from support.compare import load_result
from support.processes import TINY, run_python
from support.toy import ToyTrainer, toy_cfg

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


class Probe(Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.seen.append((inputs[0].device.type, outputs.dtype))


def test_one_gpu_trains_on_cuda_with_inputs_moved_there():
    probe = Probe()
    trainer = ToyTrainer(toy_cfg(num_epochs=1, gpu_id=[0], callbacks=[probe]))
    trainer.run()
    assert trainer.device.type == "cuda" and next(trainer.model.parameters()).is_cuda
    assert probe.seen[0] == ("cuda", torch.float32)


def test_fp16_amp_uses_a_grad_scaler_and_trains():
    probe = Probe()
    trainer = ToyTrainer(toy_cfg(num_epochs=2, gpu_id=[0], amp="fp16", callbacks=[probe]))
    trainer.run()
    assert trainer.scaler is not None and trainer.scaler.get_scale() > 0
    assert probe.seen[0][1] == torch.float16
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_bf16_amp_on_cuda():
    probe = Probe()
    ToyTrainer(toy_cfg(num_epochs=1, gpu_id=[0], amp="bf16", callbacks=[probe])).run()
    assert probe.seen[0][1] == torch.bfloat16


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_one_process_with_two_gpus_uses_data_parallel():
    trainer = ToyTrainer(toy_cfg(num_epochs=1, gpu_id=[0, 1]))
    assert isinstance(trainer.model, nn.DataParallel)
    trainer.run()


def test_channels_last_reaches_the_model_and_the_inputs():
    seen = []

    class Conv(ToyTrainer):
        def build_model(self, cfg):
            return self.build_model_parallel(nn.Sequential(nn.Unflatten(1, (2, 2, 2)), nn.Conv2d(2, 4, 1),
                                                           nn.Flatten(), nn.Linear(16, 4)))

        def run_step(self, inputs):
            x, y = inputs
            x = x.reshape(-1, 2, 2, 2).contiguous(memory_format=torch.channels_last)
            seen.append(x.is_contiguous(memory_format=torch.channels_last))
            outputs = self.model[1:](x)
            return outputs, self.criterion(outputs, y)

    trainer = Conv(toy_cfg(num_epochs=1, gpu_id=[0], channels_last=True))
    trainer.run()
    assert trainer.model[1].weight.is_contiguous(memory_format=torch.channels_last) and all(seen)


def test_nccl_ddp_on_all_gpus_trains_like_gloo_on_the_cpu(tmp_path):
    procs = min(torch.cuda.device_count(), 2)
    if procs < 2:
        pytest.skip("needs 2 GPUs")
    gpu = run_python([TINY, "--procs", procs, "--work-dir", tmp_path / "g", "--out", tmp_path / "g.pt", "--epochs", 2,
                      "--plain", "--gpu"])
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    cpu = run_python([TINY, "--procs", procs, "--work-dir", tmp_path / "c", "--out", tmp_path / "c.pt", "--epochs", 2,
                      "--plain"], env={"CUDA_VISIBLE_DEVICES": ""})
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    g, c = load_result(tmp_path / "g.pt")["weights"], load_result(tmp_path / "c.pt")["weights"]
    for k in c:
        torch.testing.assert_close(g[k].cpu(), c[k], atol=1e-4, rtol=1e-3)


def test_confusion_counts_on_cuda_equal_the_cpus_and_need_no_sync():
    from basetrainer.metric.classification_report import count_pairs

    g = torch.Generator().manual_seed(0)
    targets, preds = torch.randint(-1, 6, (1000,), generator=g), torch.randint(0, 5, (1000,), generator=g)
    expected = count_pairs(targets, preds, 5)
    torch.cuda.set_sync_debug_mode("error")  # any host sync inside raises
    try:
        counts = count_pairs(targets.cuda(), preds.cuda(), 5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert counts.cpu().tolist() == expected.tolist()
