"""The pretrained models as the task loads them: the three tiny architectures from their save_pretrained folders,
LoRA through peft (only the adapters train), the decoder layers the model names (what FSDP shards by and
activation_checkpointing [auto] wraps), and the task's loss, which is the HF model's own."""
import pytest
import torch

from basetrainer.config import Config
from basetrainer.parallel.activation_checkpointing import checkpoint_activations, named_blocks
from basetrainer.tasks.text.losses import token_losses
from basetrainer.tasks.text.pretrained import load_model, load_tokenizer, parameter_counts
from basetrainer.tasks.text.settings import LORA

LAYERS = {"llama": "LlamaDecoderLayer", "qwen2": "Qwen2DecoderLayer", "gpt2": "GPT2Block"}


def settings(folder, **more):
    values = dict(model=folder, revision=None, trust_remote_code=False, chat_template=None, model_dtype="float32",
                  attn_implementation=None, task_type="causal_lm", lora=LORA.defaults())
    return Config(**{**values, **more})


@pytest.mark.parametrize("architecture", ["llama", "qwen2", "gpt2"])
def test_each_architecture_loads_from_its_folder_and_names_its_decoder_layers(tiny_text_models, architecture):
    cfg = settings(tiny_text_models[architecture])
    model = load_model(cfg, load_tokenizer(cfg))
    assert named_blocks(model) == (LAYERS[architecture],)
    assert model.config.pad_token_id is not None


def test_with_lora_only_the_adapters_train(tiny_text_models):
    cfg = settings(tiny_text_models["llama"], lora={**LORA.defaults(), "r": 4})
    model = load_model(cfg, load_tokenizer(cfg))
    trainable, total = parameter_counts(model)
    names = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    assert names and all(".lora_A." in name or ".lora_B." in name for name in names)
    assert {name.split(".")[-4] for name in names} == {"q_proj", "v_proj"}  # peft's default for Llama
    assert trainable == 2 * (4 * (64 + 64) + 4 * (64 + 32))  # 2 layers: q (64 -> 64), v (64 -> 32: 2 kv heads)
    assert named_blocks(model) == ("LlamaDecoderLayer",)  # read through the PeftModel


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_activation_checkpointing_auto_wraps_the_decoder_layers_and_changes_no_gradient(tiny_text_models,
                                                                                       architecture):
    cfg = settings(tiny_text_models[architecture])
    plain, wrapped = (load_model(cfg, load_tokenizer(cfg)).train() for _ in range(2))
    checkpoint_activations(wrapped, ["auto"])
    assert sum(type(m).__name__ == "CheckpointWrapper" for m in wrapped.modules()) == 2
    tokens = torch.randint(0, 500, (2, 12))
    mask = torch.ones_like(tokens)
    mask[1, 8:] = 0  # a padded sample: the forward recomputed in backward must see what the first one saw
    for model in (plain, wrapped):
        model(input_ids=tokens, attention_mask=mask).logits.float().pow(2).mean().backward()
    assert all(torch.allclose(a.grad, b.grad, atol=1e-6) for a, b in zip(plain.parameters(), wrapped.parameters()))


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_the_tasks_loss_is_the_hf_models_own(tiny_text_models, architecture):
    cfg = settings(tiny_text_models[architecture])
    model = load_model(cfg, load_tokenizer(cfg))
    tokens = torch.randint(0, 500, (3, 10))
    labels = tokens.clone()
    labels[:, :4] = -100  # a masked prompt
    labels[2, 7:] = -100  # padding
    output = model(input_ids=tokens, labels=labels)
    total, count = token_losses(output.logits, labels)
    assert count == 3 * 6 - 3  # labels 4 to 9 of each row are predicted (the first never is), three are padding
    assert torch.allclose(total / count, output.loss, atol=1e-6)


def test_fsdp_chooses_the_blocks_the_model_names_over_its_own_guess(tiny_text_models):
    from basetrainer.parallel.fsdp import choose_shard_classes

    cfg = settings(tiny_text_models["gpt2"], lora={**LORA.defaults(), "r": 4})
    assert choose_shard_classes(load_model(cfg, load_tokenizer(cfg))) == ("GPT2Block",)
