"""The bundled datasets: small, generated the same way every time, so that the task and its example run offline.

- ``instructions`` (causal LM): ``prompt`` and ``completion`` pairs of four kinds a tiny model learns in minutes
  on a CPU (add two numbers, reverse a word, spell a word in capitals, greet a name; ``format: chat`` reads
  them as a user's message and the assistant's reply);
- ``reviews`` (sequence classification): a short review in ``text`` and its ``label``, ``negative`` or ``positive``
  (what its adjectives say).

Every split is drawn from a seeded generator of its own, so the test split never changes with the train split's
size.
"""
import random

NAMES = ("Ann", "Bob", "Chen", "Dara", "Eve", "Femi", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Max", "Noor",
         "Omar", "Pia", "Ravi", "Sara", "Tom", "Uma", "Vic", "Wen", "Yara", "Zoe")
WORDS = ("cat", "dog", "sun", "tree", "book", "lamp", "rain", "star", "fish", "bird", "moon", "door", "cake",
         "road", "ship", "wind", "snow", "leaf", "bell", "coin", "milk", "rose", "gold", "wolf")
GOOD = ("great", "wonderful", "lovely", "excellent", "friendly", "delicious", "perfect", "pleasant")
BAD = ("awful", "terrible", "rude", "boring", "cold", "dirty", "noisy", "disappointing")
THINGS = ("food", "service", "room", "film", "staff", "music", "view", "coffee")
LABELS = ("negative", "positive")
SIZES = {"train": 512, "test": 64}
_SEEDS = {"train": 1, "test": 2}
KINDS = ("instructions", "reviews")


def instruction(rng) -> dict:
    """One prompt and its completion (the completion starts with a space, as a reply after the prompt does)."""
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randrange(50), rng.randrange(50)
        return {"prompt": f"What is {a} plus {b}?", "completion": f" {a + b}"}
    word = rng.choice(WORDS)
    if kind == 1:
        return {"prompt": f"Reverse the word {word}.", "completion": f" {word[::-1]}"}
    if kind == 2:
        return {"prompt": f"Write {word} in capitals.", "completion": f" {word.upper()}"}
    name = rng.choice(NAMES)
    return {"prompt": f"Greet {name}.", "completion": f" Hello, {name}!"}


def review(rng) -> dict:
    """One review of two clauses whose adjectives agree, and its label."""
    label = rng.randrange(2)
    adjectives = GOOD if label else BAD
    first, second = rng.sample(THINGS, 2)
    text = f"The {first} was {rng.choice(adjectives)} and the {second} was {rng.choice(adjectives)}."
    return {"text": text, "label": LABELS[label]}


def examples(kind: str, split: str, size=None) -> list:
    """The ``split`` ("train" or "test") of the bundled dataset ``kind`` as a list of records."""
    rng = random.Random(_SEEDS[split])
    draw = instruction if kind == "instructions" else review
    return [draw(rng) for _ in range(SIZES[split] if size is None else size)]


def corpus() -> list:
    """Every text of both kinds and splits: what the tiny models' tokenizer is trained on."""
    texts = []
    for kind in KINDS:
        for split in SIZES:
            for record in examples(kind, split):
                texts.append(record.get("text") or record["prompt"] + record["completion"])
    return texts
