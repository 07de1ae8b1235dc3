"""YAML is read strictly: a file means what a YAML 1.2 reader, an editor and its writer think it means, and
every structural mistake PyYAML would let through is one line naming the file and the line."""
import pytest

from basetrainer.config import Config, apply_overrides, load_config
from basetrainer.errors import ConfigError


def refusal(tmp_path, text):
    """The one-line message of the ConfigError that loading ``text`` as a config file raises."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert "\n" not in message
    return message.replace(str(path), "c.yaml")


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "NO", "On", "OFF"])
def test_yaml_1_1_booleans_are_refused_naming_what_they_would_be(tmp_path, word):
    message = refusal(tmp_path, f"lr: 0.1\nuse_prune: {word}\n")
    assert message.startswith(f"c.yaml line 2: '{word}' is read as ")
    assert "write true or false" in message


def test_a_quoted_yes_is_text(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("answer: 'yes'\n")
    assert load_config(path) == {"answer": "yes"}


def test_true_false_and_null_in_any_case_yaml_1_2_knows_are_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: true\nb: False\nc: TRUE\nd: null\ne: ~\nf:\ng: Null\n")
    assert load_config(path) == {"a": True, "b": False, "c": True, "d": None, "e": None, "f": None, "g": None}


def test_a_number_with_a_leading_zero_is_refused_as_an_octal_surprise(tmp_path):
    assert refusal(tmp_path, "seed: 010\n") == ("c.yaml line 1: '010' is read as the octal number 8 (YAML 1.1); "
                                               "write the number without the leading zero, or quote it ('010') for "
                                               "the text")


@pytest.mark.parametrize("text, read_as", [("0o10", "the str '0o10'"), ("0b101", "the int 5"), ("1_000", "the int 1000"),
                                           ("09", "the str '09'")])
def test_numbers_yaml_1_1_and_1_2_read_differently_are_refused(tmp_path, text, read_as):
    message = refusal(tmp_path, f"batch_size: {text}\n")
    assert message.startswith(f"c.yaml line 1: '{text}' is read as {read_as} by PyYAML (YAML 1.1) but as ")


def test_a_sexagesimal_number_is_refused(tmp_path):
    assert refusal(tmp_path, "a: 1\ntime: 1:30\n") == ("c.yaml line 2: '1:30' is read as the number 90 (YAML 1.1 reads "
                                                       "1:30 as 90); quote it ('1:30') for the text")


def test_a_date_is_refused(tmp_path):
    assert refusal(tmp_path, "run: 2024-01-01\n").startswith("c.yaml line 1: '2024-01-01' is not plain data to YAML 1.1")


def test_exponents_without_a_dot_and_hexadecimal_mean_the_same_in_both_versions(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-3\nwd: 5E-4\nmask: 0x1F\nneg: -0.5\ninf: .inf\n")
    assert load_config(path) == {"lr": 1e-3, "wd": 5e-4, "mask": 31, "neg": -0.5, "inf": float("inf")}


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    assert refusal(tmp_path, "lr: 0.1\nbatch_size: 8\nlr: 0.2\n") == (
        "c.yaml line 3: the key 'lr' is given twice (first on line 1); keep one")


def test_a_nested_key_given_twice_is_refused(tmp_path):
    assert refusal(tmp_path, "optim:\n  lr: 0.1\n  lr: 0.2\n").startswith("c.yaml line 3: the key 'lr' is given twice")


def test_the_same_key_in_two_items_of_a_list_is_no_repeat(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stages:\n  - epochs: 1\n  - epochs: 2\n")
    assert load_config(path) == {"stages": [{"epochs": 1}, {"epochs": 2}]}


def test_a_key_and_value_without_a_space_after_the_colon_is_refused(tmp_path):
    assert refusal(tmp_path, "optim: lr:0.1\n") == (
        "c.yaml line 1: 'lr:0.1' is one text, not a key and its value: YAML needs a space after ':'; write 'lr: 0.1' "
        "(or quote the text)")


def test_a_line_without_a_space_after_the_colon_among_settings_names_its_line(tmp_path):
    message = refusal(tmp_path, "lr: 0.1\nbatch_size:32\nseed: 1\n")
    assert message.startswith("c.yaml line 2: ") and message.endswith("with a space after ':'")


def test_a_file_of_one_key_without_a_space_is_refused(tmp_path):
    assert refusal(tmp_path, "batch_size:32\n").startswith("c.yaml line 1: 'batch_size:32' is one text")


def test_urls_and_windows_paths_keep_their_colons(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dist_url: tcp://10.0.0.1:29500\nresume: C:\\runs\\last.pth\n")
    assert load_config(path) == {"dist_url": "tcp://10.0.0.1:29500", "resume": "C:\\runs\\last.pth"}


def test_several_documents_are_refused(tmp_path):
    message = refusal(tmp_path, "lr: 0.1\n---\nlr: 0.2\n")
    assert message.startswith("c.yaml line 2: ") and message.endswith("remove the second '---'")


def test_a_tab_is_refused_naming_its_line(tmp_path):
    message = refusal(tmp_path, "lr: 0.1\noptim:\n\tmomentum: 0.9\n")
    assert message.startswith("c.yaml line 3: ") and message.endswith("indent and separate with spaces, not tabs")


@pytest.mark.parametrize("key", ["1", "null", "3.5"])
def test_a_key_that_is_not_text_is_refused(tmp_path, key):
    assert refusal(tmp_path, f"{key}: a\n").startswith(f"c.yaml line 1: the key '{key}' is read as ")


def test_a_list_as_a_key_is_refused(tmp_path):
    assert refusal(tmp_path, "? [a, b]\n: 1\n") == "c.yaml line 1: a key must be text, not a list or a mapping"


def test_aliases_are_refused(tmp_path):
    assert refusal(tmp_path, "base: &b [1, 2]\ncopy: *b\n") == (
        "c.yaml line 2: aliases (*name) are not supported; write the value out")


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    bomb = "a: &a [x, x]\n" + "".join(f"{c}: &{c} [*{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    assert "aliases (*name) are not supported" in refusal(tmp_path, bomb)


def test_merge_keys_are_refused(tmp_path):
    assert refusal(tmp_path, "<<: {lr: 0.1}\n") == "c.yaml line 1: merge keys ('<<') are not supported; write the keys out"


@pytest.mark.parametrize("value, tag", [("!!binary aGk=", "!!binary"), ("!!set {a}", "!!set"), ("!mine x", "!mine"),
                                        ("!!python/object/apply:os.system ['true']", "!!python/object/apply:os.system")])
def test_tags_that_are_not_plain_data_are_refused(tmp_path, value, tag):
    assert refusal(tmp_path, f"a: {value}\n") == f"c.yaml line 1: the tag {tag} is not plain data; remove it"


def test_absurd_nesting_is_refused(tmp_path):
    assert "nested more than 50 levels deep" in refusal(tmp_path, "a: " + "[" * 60 + "]" * 60 + "\n")


def test_nesting_deeper_than_python_recursion_is_refused_in_one_line(tmp_path):
    assert "nested more than 50 levels deep" in refusal(tmp_path, "a: " + "[" * 20000 + "]" * 20000 + "\n")


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes("\ufefflr: 0.1\n".encode("utf-8"))
    assert load_config(path) == {"lr": 0.1}


def test_a_utf16_file_is_refused_as_not_utf8(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes("lr: 0.1\n".encode("utf-16"))
    with pytest.raises(ConfigError, match="is not UTF-8 text; save it as UTF-8 YAML"):
        load_config(path)


def test_an_override_is_read_as_strictly_as_a_file():
    with pytest.raises(ConfigError, match=r"cannot read override 'use_prune=yes': 'yes' is read as true"):
        apply_overrides(Config(), ["use_prune=yes"])


def test_an_override_that_is_not_yaml_stays_the_text_typed():
    assert apply_overrides(Config(), ["train_data=runs/[old"]) == {"train_data": "runs/[old"}
