"""A training step's loss is the mean over every token of its accumulation window: counted ahead from the
sampler's order, it matches the batches the loader then yields, and a window of two batches of 4 takes the step
one batch of 8 takes."""
import pytest
import torch

from basetrainer.data.loaders import build_dataloader, iterate_from
from basetrainer.tasks.text.config import parse_config
from basetrainer.tasks.text.losses import WindowTokens, training_loss


def test_the_tokens_read_ahead_are_those_of_the_batches_the_loader_yields():
    counts = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]  # each sample's tokens that take a loss
    loader = build_dataloader(list(range(12)), batch_size=2, phase="train", seed=7)
    ahead = WindowTokens(loader, counts)
    batches = [batch.tolist() for batch in iterate_from(loader, 1, 0)]  # epoch 1, shuffled by (seed, epoch)
    for first in range(0, 6, 2):
        assert ahead.of(1, first, 2) == sum(counts[i] for batch in batches[first:first + 2] for i in batch)
    resumed = [batch.tolist() for batch in iterate_from(loader, 1, 3)]  # a resume mid-epoch: the same batches
    assert resumed == batches[3:] and ahead.of(1, 3, 1) == sum(counts[i] for i in batches[3])


def test_without_an_order_to_read_ahead_a_batch_is_its_own_window():
    assert WindowTokens(torch.utils.data.DataLoader(list(range(4)), batch_size=2), [1] * 4).of(0, 0, 1) is None
    total, count = torch.tensor(6.0), torch.tensor(3)
    assert training_loss(total, count) == 2.0  # one process: this batch's tokens
    assert training_loss(total, count, window_tokens=12, window=2) == 1.0  # 6 of a window's 12 tokens, x 2 batches


@pytest.mark.slow
def test_a_window_of_two_batches_of_4_takes_the_step_one_batch_of_8_takes(tiny_text_models, tmp_path):
    from basetrainer.parallel import unwrap_model
    from basetrainer.tasks.text.trainer import TextTrainer

    adapters = []
    for batch, accumulate in ((8, 1), (4, 2)):
        cfg = parse_config(["--model", tiny_text_models["llama"], "--work_dir", str(tmp_path / f"b{batch}"),
                            "--test_data", "", "max_samples=16", f"batch_size={batch}",
                            f"accumulate_grad_batches={accumulate}", "num_epochs=null", "max_iters=2", "lora.r=4",
                            "lora.dropout=0", "lr=0.01", "progress=false", "loggers=[]", "scheduler=constant",
                            "num_warn_up=0"])
        trainer = TextTrainer(cfg)
        trainer.run()
        adapters.append({k: v for k, v in unwrap_model(trainer.model).state_dict().items() if ".lora_" in k})
    assert all(torch.allclose(adapters[0][key], adapters[1][key], atol=1e-6) for key in adapters[0])
