"""Records to token samples: the prompt's tokens masked, the completion and the end token learnt, chat data through
the template, packing into blocks, padding on the right with the labels ignored there, and the format read from
the columns."""
import pytest

from basetrainer.errors import DataError
from basetrainer.tasks.text.encoding import IGNORE, Collator, Encoder, detect_format, pack
from basetrainer.tasks.text.pretrained import load_tokenizer
from basetrainer.tasks.text.settings import FIELDS

RECORD = {"prompt": "What is 3 plus 4?", "completion": " 7"}


@pytest.fixture(scope="module")
def tokenizers(tiny_text_models):
    from basetrainer.config import Config

    return {name: load_tokenizer(Config(model=folder, revision=None, trust_remote_code=False, chat_template=None))
            for name, folder in tiny_text_models.items()}


def encoder(tokenizer, fmt="prompt_completion", **more):
    return Encoder(tokenizer, fmt, FIELDS.defaults(), more.pop("max_seq_len", 64), **more)


def test_the_prompt_takes_no_loss_and_the_completion_and_the_end_token_do(tokenizers):
    tokenizer = tokenizers["llama"]
    sample = encoder(tokenizer)(RECORD)
    prompt = tokenizer(RECORD["prompt"])["input_ids"]  # with the start token Llama's tokenizer adds
    assert sample["input_ids"][:len(prompt)] == prompt and prompt[0] == tokenizer.bos_token_id
    assert sample["labels"][:len(prompt)] == [IGNORE] * len(prompt)
    assert sample["labels"][len(prompt):] == sample["input_ids"][len(prompt):]
    assert sample["input_ids"][-1] == tokenizer.eos_token_id


def test_without_completion_only_loss_every_token_is_learnt(tokenizers):
    sample = encoder(tokenizers["gpt2"], completion_only_loss=False)(RECORD)
    assert sample["labels"] == sample["input_ids"]


def test_a_chat_record_learns_the_assistants_reply_after_the_template_opened_its_turn(tokenizers):
    tokenizer = tokenizers["qwen2"]
    sample = encoder(tokenizer, "chat")(RECORD)  # a prompt and completion read as a user's message and the reply
    learnt = tokenizer.decode([token for token, label in zip(sample["input_ids"], sample["labels"]) if label != IGNORE])
    assert learnt == "7<|im_end|>\n"
    assert tokenizer.decode(sample["input_ids"]).startswith("<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n"
                                                            "<|im_start|>assistant\n")


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_a_conversation_learns_every_assistant_reply_and_no_other_turn(tokenizers, architecture):
    tokenizer = tokenizers[architecture]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Greet Ann."},
                {"role": "assistant", "content": "Hello, Ann!"}, {"role": "user", "content": "Greet Bob."},
                {"role": "assistant", "content": "Hello, Bob!"}]
    sample = encoder(tokenizer, "chat", max_seq_len=256)({"messages": messages})
    learnt = [token for token, label in zip(sample["input_ids"], sample["labels"]) if label != IGNORE]
    assert tokenizer.decode(learnt) == "Hello, Ann!<|im_end|>\nHello, Bob!<|im_end|>\n"
    assert tokenizer.decode(sample["input_ids"]) == tokenizer.apply_chat_template(messages, tokenize=False)
    with pytest.raises(DataError, match="without an assistant's message has nothing to learn"):
        encoder(tokenizer, "chat")({"messages": messages[:2]})


def test_a_sample_longer_than_max_seq_len_is_cut_at_the_end(tokenizers):
    sample = encoder(tokenizers["llama"], "text", max_seq_len=5)({"text": "Reverse the word lamp, then greet Ann."})
    assert len(sample["input_ids"]) == len(sample["labels"]) == 5


def test_packing_concatenates_the_samples_into_full_blocks_and_keeps_the_prompts_masked():
    samples = {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]], "labels": [[IGNORE, 2, 3], [IGNORE, 5], [6, 7, 8, 9]]}
    assert pack(samples, 4) == {"input_ids": [[1, 2, 3, 4], [5, 6, 7, 8]],
                                "labels": [[IGNORE, 2, 3, IGNORE], [5, 6, 7, 8]]}


def test_a_batch_is_padded_on_the_right_with_the_padding_masked_and_ignored():
    batch = Collator(pad_id=0)([{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}, {"input_ids": [8], "labels": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]


def test_a_tokenizer_without_a_padding_token_pads_with_its_end_token(tokenizers):
    assert tokenizers["llama"].pad_token == "</s>" and tokenizers["gpt2"].pad_token == "<|endoftext|>"
    assert tokenizers["qwen2"].pad_token == "<|endoftext|>"  # its own


@pytest.mark.parametrize("columns, expected", [(["messages"], "chat"), (["prompt", "completion", "id"],
                                                                        "prompt_completion"), (["text"], "text")])
def test_auto_reads_the_format_from_the_columns(columns, expected):
    assert detect_format(columns, FIELDS.defaults(), "causal_lm", "auto", "train_data") == expected


def test_data_without_the_fields_is_refused_naming_its_columns():
    with pytest.raises(DataError, match=r"^train_data: no messages or prompt\+completion or text column \(it has "
                                        r"question, answer\); name the columns in fields"):
        detect_format(["question", "answer"], FIELDS.defaults(), "causal_lm", "auto", "train_data")
