"""Records to tokens: the text fields or the chat template, the labels a causal LM learns from (the prompt's
tokens masked when only the completion is learnt), packing, and the batches.

A causal-LM sample is ``{"input_ids", "labels"}`` of the same length: ``labels`` is ``input_ids`` with
``IGNORE`` where no loss is taken (the prompt, padding); the model learns to predict ``labels[t]`` from the
tokens before ``t`` (the shift is the loss's, :mod:`~basetrainer.tasks.text.losses`). A classification sample is ``{"input_ids",
"label"}``. The formats of a record:

- ``text``: the whole text is learnt, then the end token;
- ``prompt_completion``: the prompt as the tokenizer encodes a text (a start token where the model has one),
  the completion after it and the end token; with ``completion_only_loss`` only the completion and the end
  token are learnt;
- ``chat``: ``messages`` (``[{role, content}, ...]``), or a prompt and its completion as a user's message and
  the assistant's reply, through the chat template: every assistant reply is learnt, from where the template
  opened the assistant's turn to the end of the reply (the template's own end of turn included), as TRL's
  ``assistant_only_loss``; the system and user turns are not (``completion_only_loss: false``: all of it is).
  A reply is found as what the template writes for the conversation up to it beyond what it writes for the
  conversation before it with the assistant's turn opened.
"""
from ...errors import DataError

IGNORE = -100  # the label of a token that takes no loss (torch's cross_entropy ignore_index)
FORMATS = ("text", "prompt_completion", "chat")


def detect_format(columns, fields: dict, task_type: str, given: str, name: str) -> str:
    """The format of a dataset with ``columns``: ``given``, or with ``auto`` the first whose fields it has; a
    DataError naming the columns when it has none."""
    needs = {"chat": (fields["messages"],), "prompt_completion": (fields["prompt"], fields["completion"]),
             "text": (fields["text"],)}
    if task_type == "sequence_classification":
        needs = {"text": (fields["text"], fields["label"])}
    candidates = list(needs) if given == "auto" else [given]
    for candidate in candidates:
        if candidate in needs and all(column in columns for column in needs[candidate]):
            return candidate
        if candidate == "chat" and given == "chat" and all(column in columns for column in needs["prompt_completion"]):
            return candidate  # a prompt and its completion as a user's message and the reply
    wanted = " or ".join("+".join(needs[c]) for c in candidates if c in needs) or "text+label"
    raise DataError(f"{name}: no {wanted} column (it has {', '.join(columns) or 'none'}); name the columns in "
                    f"fields (e.g. fields.text=content), or choose another format")


class Encoder:
    """Encodes one record of ``format`` into a sample (see the module docstring); ``labels``: a classification
    run's label names, in the order of their ids."""

    def __init__(self, tokenizer, format: str, fields: dict, max_seq_len: int, completion_only_loss: bool = True,
                 labels=None):
        self.tokenizer, self.format, self.fields = tokenizer, format, fields
        self.max_seq_len, self.completion_only_loss = max_seq_len, completion_only_loss
        self.label_ids = {label: index for index, label in enumerate(labels)} if labels is not None else None
        self.end = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def __call__(self, record: dict) -> dict:
        if self.label_ids is not None:
            return self.classification(record)
        if self.format == "text":
            ids = self._tokens(record[self.fields["text"]], special=True) + self.end
            return self._truncated(ids, list(ids))
        if self.format == "chat":
            return self.conversation(self.messages(record))
        prompt, completion = self.prompt_and_completion(record)
        prompt_ids = self._tokens(prompt, special=True)
        completion_ids = self._tokens(completion, special=False) + self.end
        masked = [IGNORE] * len(prompt_ids) if self.completion_only_loss else list(prompt_ids)
        return self._truncated(prompt_ids + completion_ids, masked + completion_ids)

    def messages(self, record: dict) -> list:
        """A chat record's messages: its own, or its prompt and completion as a user's message and the reply."""
        if self.fields["messages"] in record:
            return list(record[self.fields["messages"]])
        return [{"role": "user", "content": str(record[self.fields["prompt"]])},
                {"role": "assistant", "content": str(record[self.fields["completion"]]).strip()}]

    def conversation(self, messages: list) -> dict:
        """The tokens of a whole conversation, every assistant reply learnt (see the module docstring)."""
        template = self.tokenizer.apply_chat_template
        whole = template(messages, tokenize=False)
        replies = []
        for index, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            before = self.chat_prompt(messages[:index])
            upto = template(messages[:index + 1], tokenize=False)
            if not (upto.startswith(before) and whole.startswith(upto)):
                raise DataError("the chat template writes a conversation's start differently once more messages "
                                "follow, so the replies cannot be told apart; use another chat_template")
            replies.append((len(before), len(upto)))
        if not replies:
            raise DataError("a chat record without an assistant's message has nothing to learn")
        try:
            encoded = self.tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError:  # a Python tokenizer: no character offsets to find the replies by
            raise DataError("chat data needs a fast tokenizer (one with tokenizer.json): save the tokenizer with "
                            "tokenizers, or give prompt and completion fields with format: prompt_completion") from None
        ids = encoded["input_ids"]
        learnt = [not self.completion_only_loss or any(start <= first < end for start, end in replies)
                  for first, _ in encoded["offset_mapping"]]
        return self._truncated(ids, [token if keep else IGNORE for token, keep in zip(ids, learnt)])

    def prompt_and_completion(self, record: dict) -> tuple:
        """The prompt text and the completion text of a ``prompt_completion`` record, or of a ``chat`` record's
        last reply (the conversation before it with the assistant's turn opened, and the reply)."""
        if self.format == "prompt_completion":
            return str(record[self.fields["prompt"]]), str(record[self.fields["completion"]])
        messages = self.messages(record)
        last = max((i for i, message in enumerate(messages) if message.get("role") == "assistant"), default=None)
        if last is None:
            raise DataError("a chat record without an assistant's message has nothing to learn")
        prompt = self.chat_prompt(messages[:last])
        return prompt, self.tokenizer.apply_chat_template(messages[:last + 1], tokenize=False)[len(prompt):]

    def chat_prompt(self, messages) -> str:
        """The chat template's text of ``messages`` with the assistant's turn opened."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def prompt_text(self, record: dict) -> str:
        """What a generation starts from for ``record``: its prompt (its text, for the text format)."""
        if self.format == "text":
            return str(record[self.fields["text"]])
        return self.prompt_and_completion(record)[0]

    def classification(self, record: dict) -> dict:
        label = record[self.fields["label"]]
        if label not in self.label_ids:
            raise DataError(f"label {label!r} is not one of the training labels ({', '.join(map(str, self.label_ids))})")
        ids = self._tokens(record[self.fields["text"]], special=True)[: self.max_seq_len]
        return {"input_ids": ids, "label": self.label_ids[label]}

    def _tokens(self, text, special: bool) -> list:
        return self.tokenizer(str(text), add_special_tokens=special)["input_ids"]

    def _truncated(self, ids: list, labels: list) -> dict:
        return {"input_ids": ids[: self.max_seq_len], "labels": labels[: self.max_seq_len]}


def pack(samples, block: int) -> dict:
    """``samples`` (a batch of columns ``input_ids``, ``labels``) concatenated and cut into blocks of ``block``
    tokens, the rest dropped, as ``run_clm.py``'s ``group_texts`` does: attention crosses the samples of a
    block; a prompt's tokens stay masked."""
    ids = [token for sample in samples["input_ids"] for token in sample]
    labels = [label for sample in samples["labels"] for label in sample]
    whole = len(ids) // block * block
    return {"input_ids": [ids[i:i + block] for i in range(0, whole, block)],
            "labels": [labels[i:i + block] for i in range(0, whole, block)]}


class Collator:
    """Pads a list of samples on the right to the longest (training and evaluation; generation pads on the left,
    :mod:`~basetrainer.tasks.text.generation`): ``input_ids`` with ``pad_id``, ``attention_mask`` 0 there, ``labels`` ``IGNORE``
    there; a classification batch has one ``labels`` id per sample."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, samples: list) -> dict:
        import torch

        longest = max(len(sample["input_ids"]) for sample in samples)
        ids = torch.full((len(samples), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(samples), longest), dtype=torch.long)
        for row, sample in enumerate(samples):
            ids[row, :len(sample["input_ids"])] = torch.tensor(sample["input_ids"], dtype=torch.long)
            mask[row, :len(sample["input_ids"])] = 1
        batch = {"input_ids": ids, "attention_mask": mask}
        if "label" in samples[0]:
            batch["labels"] = torch.tensor([sample["label"] for sample in samples], dtype=torch.long)
            return batch
        labels = torch.full((len(samples), longest), IGNORE, dtype=torch.long)
        for row, sample in enumerate(samples):
            labels[row, :len(sample["labels"])] = torch.tensor(sample["labels"], dtype=torch.long)
        batch["labels"] = labels
        return batch
