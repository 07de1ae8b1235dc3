"""What ``basetrainer shards`` converts besides an image folder, run in this process: a dataset of one's own named
MODULE:NAME, and COCO data; and the one-line refusals of a name that is no dataset."""
import json

import pytest
import torch

from basetrainer.data.streaming import open_shards
from basetrainer.tasks import shards
from basetrainer.tasks.detection.scenes import write_digit_scenes

OWN_DATASET = '''
import torch

class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 30

    def __getitem__(self, index):
        return torch.full((3,), float(index)), index * index

def make():
    return Squares()

not_a_dataset = 42
'''


def test_a_dataset_of_ones_own_is_written_item_by_item(tmp_path, capsys):
    (tmp_path / "mine.py").write_text(OWN_DATASET)
    shards.main(["--dataset", f"{tmp_path / 'mine.py'}:make", "--out", str(tmp_path / "s"), "--shard-size", "500B",
                 "--no-progress"])
    assert capsys.readouterr().out.startswith("wrote 30 samples in ")
    data = open_shards(tmp_path / "s")
    assert data.kind == "dataset" and len(data.manifest.shards) > 1
    features, square = data[7]
    assert torch.equal(features, torch.full((3,), 7.0)) and square == 49


def test_coco_data_is_written_with_its_categories_and_image_ids(tmp_path):
    scenes = write_digit_scenes(tmp_path / "scenes", split_sizes={"val": 3})
    shards.main(["--coco", f"{scenes}/val/images", f"{scenes}/val/instances.json", "--out", str(tmp_path / "s"),
                 "--no-progress"])
    meta = json.load(open(tmp_path / "s" / "shards.json"))["meta"]
    coco = json.load(open(f"{scenes}/val/instances.json"))
    assert meta["image_ids"] == [image["id"] for image in coco["images"]]
    assert meta["categories"] == [c["name"] for c in sorted(coco["categories"], key=lambda c: c["id"])]


@pytest.mark.parametrize("name, said", [("not_a_dataset", "is a int, not a map-style dataset"),
                                        ("missing", "has no missing"), ("", "write MODULE:NAME")])
def test_a_name_that_is_no_dataset_is_one_line(tmp_path, capsys, name, said):
    (tmp_path / "mine.py").write_text(OWN_DATASET)
    spec = f"{tmp_path / 'mine.py'}:{name}" if name else "mine"
    with pytest.raises(SystemExit) as exit_:
        shards.main(["--dataset", spec, "--out", str(tmp_path / "s")])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and said in error and error.count("\n") == 1 and not (tmp_path / "s").exists()
