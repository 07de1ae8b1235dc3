"""What only a GPU can show: NCCL, fp16 AMP with GradScaler, DataParallel, channels_last, torch.compile
and FSDP2 on CUDA.

Every test here is skipped where CUDA is absent (CI has none); run them on a GPU machine
with ``python -m pytest -q tests/parallel/test_gpu.py``, or ``bash bench/gpu.sh``, which runs
them and then the GPU benchmarks.
"""
import pytest
import torch
import torch.distributed as dist
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


@pytest.mark.slow  # compile starts compiler processes
def test_torch_compile_on_cuda_trains_like_eager():
    eager = ToyTrainer(toy_cfg(num_epochs=2, gpu_id=[0]))
    eager.run()
    compiled = ToyTrainer(toy_cfg(num_epochs=2, gpu_id=[0], compile=True))
    compiled.run()
    assert compiled.model._compiled_call_impl is not None  # nn.Module.compile: in place, plain keys
    expected, got = eager.model.state_dict(), compiled.model.state_dict()
    assert list(got) == list(expected)
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], atol=1e-5, rtol=1e-4)


@pytest.fixture
def nccl_group(tmp_path):
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train_on_cuda(model, steps=12, amp=False):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=g).cuda(), torch.randint(0, 4, (16,), generator=g).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return optimizer


@pytest.mark.slow  # compile starts compiler processes
def test_fsdp2_on_cuda_with_nccl_trains_like_the_plain_model_and_with_bf16_and_compile(nccl_group):
    """fully_shard on a 1-rank NCCL group: sharded DTensors on the GPU, the same weights as the plain model;
    bf16 gathering (MixedPrecisionPolicy) and per-unit torch.compile train close to it."""
    from torch.distributed.tensor import DTensor

    from basetrainer.parallel import FSDPStrategy
    from support.workers.fsdp_worker import BlockMLP

    assert dist.get_backend() == "nccl"
    torch.manual_seed(0)
    plain = BlockMLP().cuda()
    _train_on_cuda(plain)
    expected = {k: v.float().cpu() for k, v in plain.state_dict().items()}

    def sharded(**options):
        strategy = FSDPStrategy(torch.device("cuda"), **options)
        torch.manual_seed(0)
        model = strategy.wrap(BlockMLP())
        strategy.prepare_for_optimizer(model)
        optimizer = _train_on_cuda(model, amp=options.get("amp") is not None)
        strategy.check_optimizer(model, optimizer)
        assert all(isinstance(p, DTensor) and p.device.type == "cuda" for p in model.parameters())
        return {k: v.float().cpu() for k, v in strategy.model_state_dict(model).items()}

    fsdp = sharded()
    assert list(fsdp) == list(expected)
    for k in expected:
        torch.testing.assert_close(fsdp[k], expected[k], atol=1e-5, rtol=1e-4)
    fast = sharded(amp=torch.bfloat16, compile=True)
    assert 0 < max((fast[k] - expected[k]).abs().max().item() for k in expected) < 0.05  # close, not equal


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
    targets, preds = targets.cuda(), preds.cuda()  # copies from pageable memory count as syncs: before the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host sync inside raises
    try:
        counts = count_pairs(targets, preds, 5)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert counts.cpu().tolist() == expected.tolist()
