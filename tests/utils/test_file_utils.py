"""Specification of basetrainer.utils.file_utils."""
import errno
import os
import re

import pytest

from basetrainer.errors import ConfigError, DiskFullError
from basetrainer.utils import file_utils
from basetrainer.utils.file_utils import copy_file_to_dir, create_dir, get_time, write_text_atomic
from support.full_disk import small_filesystem


def test_create_dir_makes_parents_and_returns_the_path(tmp_path):
    path = str(tmp_path / "run" / "model")
    assert create_dir(path) == path
    assert os.path.isdir(path)


def test_create_dir_of_an_existing_folder_is_fine(tmp_path):
    assert create_dir(str(tmp_path)) == str(tmp_path)


def test_create_dir_without_permission_names_the_path_and_the_fix(monkeypatch, tmp_path):
    def refuse(path, exist_ok=False):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(file_utils.os, "makedirs", refuse)
    path = str(tmp_path / "locked")
    with pytest.raises(ConfigError) as error:
        create_dir(path)
    assert str(error.value) == f"cannot create {path}: permission denied; choose a writable work_dir"


def test_create_dir_where_a_file_stands_is_a_config_error(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(ConfigError, match="a file of that name exists"):
        create_dir(str(tmp_path / "taken"))


def test_copy_file_to_dir_copies_into_a_new_folder_and_returns_the_copy(tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text("lr: 0.1\n")
    target = copy_file_to_dir(str(source), str(tmp_path / "run"))
    assert target == str(tmp_path / "run" / "config.yaml")
    assert open(target).read() == "lr: 0.1\n"


def test_copy_file_to_dir_with_no_file_does_nothing(tmp_path):
    assert copy_file_to_dir(None, str(tmp_path / "run")) is None
    assert not (tmp_path / "run").exists()


def test_copy_file_to_its_own_folder_is_fine(tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text("lr: 0.1\n")
    assert copy_file_to_dir(str(source), str(tmp_path)) == str(source)
    assert source.read_text() == "lr: 0.1\n"


def test_copy_of_a_missing_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml"):
        copy_file_to_dir(str(tmp_path / "missing.yaml"), str(tmp_path / "run"))


def test_write_text_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out" / "history.txt"
    write_text_atomic(str(path), "old")
    write_text_atomic(str(path), "new")
    assert path.read_text() == "new"
    assert os.listdir(path.parent) == ["history.txt"]


def test_a_full_disk_is_a_one_line_error_naming_the_file_and_the_old_file_stays(tmp_path):
    with small_filesystem(tmp_path / "disk", "1m") as disk:
        path = os.path.join(disk, "history.csv")
        write_text_atomic(path, "old")
        with pytest.raises(DiskFullError) as error:
            write_text_atomic(path, "x" * 3_000_000)
        assert isinstance(error.value, OSError) and error.value.errno == errno.ENOSPC and error.value.exit_code == 2
        assert re.fullmatch(rf"could not write {re.escape(path)}: no space left on device \([\d.]+ [KM]?B(ytes)? free\); "
                            r"free some disk space or write elsewhere \(work_dir, --out\) \(the file there before is intact\)",
                            str(error.value))
        assert open(path).read() == "old" and os.listdir(disk) == ["history.csv"]


def test_get_time_is_a_sortable_timestamp_by_default():
    assert re.fullmatch(r"\d{8}_\d{6}", get_time())


def test_get_time_takes_a_strftime_format():
    assert re.fullmatch(r"\d{4}", get_time("%Y"))
