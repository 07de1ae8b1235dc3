"""Declared settings: what each kind of value accepts, and the one line a refusal is."""
import argparse

import pytest

from basetrainer.config.flags import ArgumentParser, add_setting_flags
from basetrainer.config.kinds import Boolean, Choice, Fields, Integer, Invalid, ListOf, Named, Number, OneOf, Text
from basetrainer.config.schema import Schema, Setting
from basetrainer.errors import ConfigError


def refused(kind, value, nullable=False):
    with pytest.raises(ConfigError) as error:
        Setting("key", kind, None, "help", nullable=nullable).check(value, "in c.yaml line 3")
    return str(error.value)


def test_a_refusal_names_the_key_what_it_accepts_the_value_and_where_it_came_from():
    assert refused(Integer(minimum=1), 0) == "config key 'key' expects an integer >= 1, got int 0 (in c.yaml line 3)"


@pytest.mark.parametrize("value", [True, 2.0, "2", None])
def test_an_integer_is_no_bool_float_text_or_null(value):
    assert "expects an integer" in refused(Integer(), value)


def test_an_integer_beyond_64_bits_is_refused():
    assert refused(Integer(minimum=1), 2 ** 70).endswith(": it does not fit in 64 bits")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_number_is_finite(value):
    assert refused(Number(), value).endswith(": NaN and infinities are not allowed")


def test_a_number_takes_an_integer():
    assert Number(minimum=0).check(3) == 3


@pytest.mark.parametrize("kind, described", [
    (Number(0, 1, above=True), "a number in (0, 1]"), (Number(0, 1, below=True), "a number in [0, 1)"),
    (Number(0, above=True), "a number > 0"), (Integer(0, 10), "an integer in [0, 10]"),
    (Number(0, 1e9), "a number in [0, 1e9]")])
def test_bounds_are_described_with_their_openness(kind, described):
    assert kind.describe() == described


def test_a_bool_is_only_true_or_false():
    assert refused(Boolean(), "false") == "config key 'key' expects true or false, got str 'false' (in c.yaml line 3)"


def test_a_choice_ignores_case_and_spaces_and_gives_the_declared_spelling():
    assert Choice("ddp", "fsdp").check(" FSDP ") == "fsdp"


def test_a_choice_maps_aliases_and_booleans_to_choices():
    amp = Choice("none", "bf16", aliases={"bfloat16": "bf16", False: "none"})
    assert (amp.check("BFloat16"), amp.check(False)) == ("bf16", "none")


def test_a_choice_of_booleans_does_not_take_one_or_zero():
    assert "expects true or false" in refused(Choice(True, False), 1)


def test_a_list_refusal_names_the_item_and_why():
    assert refused(ListOf(Integer(minimum=1), length=2), [32, 0]) == (
        "config key 'key' expects a list of 2 integers >= 1, got list [32, 0] (in c.yaml line 3): item 1 is int 0")


def test_a_list_of_the_wrong_length_says_how_many_items_it_has():
    assert refused(ListOf(Integer(), length=2), [1]).endswith(": it has 1 item")


def test_a_list_of_unique_items_refuses_a_repeat():
    assert refused(ListOf(Text(), unique=True), ["csv", "csv"]).endswith(": an item is repeated")


def test_a_list_that_takes_a_single_item_gives_a_list():
    assert ListOf(Text(), single=True).check("Block") == ["Block"]


FIELDS = Fields(period=(Integer(minimum=0), 0), warmup_steps=(Integer(minimum=0), 0))


def test_fields_missing_or_null_take_their_defaults():
    assert FIELDS.check({"period": 16, "warmup_steps": None}) == {"period": 16, "warmup_steps": 0}


def test_a_name_that_is_no_field_is_refused_naming_it():
    with pytest.raises(Invalid, match="^peroid is no field of it$"):
        FIELDS.check({"peroid": 4})


def test_a_name_that_is_no_plain_word_is_quoted_so_that_the_refusal_stays_one_line():
    with pytest.raises(Invalid, match=r"^'\\n', 3 is no field of it$"):  # found by the fuzz: target: {"\n": null}
        FIELDS.check({"\n": None, 3: 1})


def test_a_field_refusal_names_the_field_and_its_value():
    with pytest.raises(Invalid, match="^period is int -1$"):
        FIELDS.check({"period": -1})
    assert FIELDS.describe() == "a mapping of period (an integer >= 0), warmup_steps (an integer >= 0)"


def test_text_refuses_a_nul_character():
    assert refused(Text(), "a\x00b").endswith(": it holds a NUL character")


def test_one_of_takes_the_first_kind_that_fits():
    kind = OneOf(Boolean(), Text(non_empty=True, meaning="a path"))
    assert (kind.check(False), kind.check("w.pth"), kind.describe()) == (False, "w.pth", "true or false or a path")


def test_a_named_value_refusal_is_the_registry_own_line_and_the_source():
    def resolve(name):
        if name != "resnet18":
            raise ConfigError(f"unknown net_type {name!r}; did you mean resnet18?")
        return name
    assert refused(Named(resolve, "a model"), "resnet1") == (
        "config key 'key': unknown net_type 'resnet1'; did you mean resnet18? (in c.yaml line 3)")


def test_a_null_for_a_nullable_key_is_null():
    assert Setting("key", Integer(), 5, "help", nullable=True).check(None) is None


def test_the_text_none_for_a_nullable_key_says_how_to_write_null():
    assert refused(Integer(), "None", nullable=True).endswith(": for null write null or ~ (None is text in YAML)")


def test_a_long_value_is_cut_in_the_message():
    message = refused(Integer(), "x" * 10_000)
    assert len(message) < 200 and "..." in message


SCHEMA = Schema([Setting("lr", Number(0, above=True), 0.1, "learning rate"),
                 Setting("batch_size", Integer(minimum=1), 32, "images per batch", flag={})])


def test_strict_checking_refuses_an_undeclared_key_suggesting_the_closest():
    with pytest.raises(ConfigError, match=r"^unknown config key 'lrr' \(from the command line\): did you mean 'lr'\?$"):
        SCHEMA.check({"lrr": 1}, "from the command line", strict=True)


def test_checking_lets_undeclared_keys_through_unless_strict():
    assert SCHEMA.check({"lr": 1, "mine": object()}) == {"lr": 1}


def test_each_value_is_named_with_its_own_source():
    with pytest.raises(ConfigError, match=r"got int 0 \(from --batch_size\)$"):
        SCHEMA.check({"lr": 0.5, "batch_size": 0}, {"lr": "in c.yaml line 1", "batch_size": "from --batch_size"}.get)


def test_reading_gives_every_declared_key_its_default_when_missing_or_null():
    assert SCHEMA.read(argparse.Namespace(lr=None, other=1)) == {"lr": 0.1, "batch_size": 32}


def test_a_setting_is_declared_once():
    with pytest.raises(ValueError, match="declared twice"):
        Schema([SCHEMA["lr"], SCHEMA["lr"]])


def test_adding_schemas_replaces_same_named_settings_in_place():
    merged = SCHEMA + Schema([Setting("lr", Number(0, above=True), 0.2, "lr"), Setting("seed", Integer(), 0, "seed")])
    assert (merged.names(), merged["lr"].default) == (["lr", "batch_size", "seed"], 0.2)


def test_flags_made_from_settings_take_their_defaults_and_keys_without_flags_still_get_theirs():
    parser = add_setting_flags(ArgumentParser(), SCHEMA)
    assert vars(parser.parse_args(["--batch_size", "8"])) == {"lr": 0.1, "batch_size": 8}


def test_a_command_line_mistake_is_one_line_and_exit_code_2(capsys):
    parser = add_setting_flags(ArgumentParser(prog="train"), SCHEMA)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--batch_size", "many"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("error: train: argument --batch_size: invalid int value: 'many'; "
                                       "see train --help\n")
