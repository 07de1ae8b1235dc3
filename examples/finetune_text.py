"""Fine-tune a pretrained transformer with LoRA and save it back as a save_pretrained folder, offline.

    python examples/finetune_text.py                          # a tiny Llama-like model, the bundled instructions
    python examples/finetune_text.py lora.r=0 lr=0.001        # full fine-tuning instead of LoRA
    python examples/finetune_text.py --model Qwen/Qwen2.5-0.5B --train_data train.jsonl --test_data test.jsonl amp=bf16
    python examples/finetune_text.py --distributed --gpu_id 0 1 strategy=fsdp   # 2 GPUs, or 2 CPU processes (gloo)
    python examples/finetune_text.py --task_type sequence_classification        # the bundled reviews, 2 labels
    python examples/finetune_text.py --resume auto            # continue from work_dir's last.pth
    python examples/finetune_text.py --help

Nothing is fetched. With the default model missing, a tiny Llama-like model (2 decoder layers, 140k
parameters) is made here the way a hub model is: a byte-level BPE tokenizer trained with `tokenizers` on the
bundled texts, the model built from a LlamaConfig, both written to data/text/tiny-llama with save_pretrained
(basetrainer/tasks/text/tiny_models.py; also Qwen2- and GPT-2-like ones). The run then loads that folder with
AutoModelForCausalLM.from_pretrained exactly as it loads a hub name, adds LoRA adapters through peft, and
fine-tunes them on generated prompt/completion pairs (add two numbers, reverse a word, spell it in capitals,
greet a name). Each evaluation logs the test loss, perplexity, tokens/s and the completions of three test
prompts; after 10 epochs (37 s of training with one thread on a 2-core CPU: OMP_NUM_THREADS=1 where other
jobs share the cores) the test loss is about 0.35, from 6.2, and 'Write lamp in capitals.' gets 'LAMP'. At the
end, work_dirs/text_example/model/model_final/ holds the adapter and the tokenizer, which peft and
transformers load, and `basetrainer export work_dirs/text_example/model/model_final --out merged/` writes the
model with the adapter merged into its weights.

The pipeline lives in basetrainer/tasks/text/ (TextTrainer in trainer.py); `basetrainer train --task text`
runs the same code. The settings below are this example's; any of them can be given again on the command line.
"""
import sys

from basetrainer.tasks.text import main

# The example's own defaults. The tiny model's weights are random, not pretrained: its embeddings and output layer
# must learn too (modules_to_save), beside adapters on every linear layer, at a high learning rate. With a pretrained
# model leave modules_to_save out and take lr 1e-4 to 3e-4.
EXAMPLE = ["--num_epochs", "10", "--lr", "0.005", "--work_dir", "work_dirs/text_example", "lora.r=16", "lora.alpha=32",
           "lora.target_modules=[all-linear]", "lora.modules_to_save=[embed_tokens,lm_head]", "log_freq=32"]

if __name__ == "__main__":
    main([*EXAMPLE, *sys.argv[1:]])
