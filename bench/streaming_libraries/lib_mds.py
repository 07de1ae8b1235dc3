"""Part of the streaming libraries' comparison (see drive.py)."""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import torch
from streaming import MDSWriter, StreamingDataset, StreamingDataLoader
from streaming.base.util import clean_stale_shared_memory

mode, root = sys.argv[1], sys.argv[2]


class DS(StreamingDataset):
    def __getitem__(self, i):
        s = super().__getitem__(i)
        return s["id"], torch.from_numpy(decode(s["image"])), s["label"]


def make(local, remote=None, cache_limit=None, shuffle=True):
    return DS(local=local, remote=remote, shuffle=shuffle, shuffle_seed=7, batch_size=8, num_canonical_nodes=1,
              cache_limit=cache_limit, shuffle_algo="py1e", predownload=16, download_retry=1, download_timeout=10)


if mode == "write":
    t = time.perf_counter()
    with MDSWriter(out=root, columns={"id": "int", "image": "bytes", "label": "int"}, size_limit=PER_SHARD * 3200) as w:
        for i, img, label in samples():
            w.write({"id": i, "image": img, "label": label})
    out(write_s=time.perf_counter() - t, shards=len([f for f in os.listdir(root) if f.endswith(".mds")]), bytes=dir_size(root))
    sys.exit()

init_dist()
workers = int(sys.argv[3]); stop = int(sys.argv[4]) if len(sys.argv) > 4 else -1
state_file = sys.argv[5] if len(sys.argv) > 5 else None
remote = os.environ.get("CMP_REMOTE")
local = root if remote is None else os.environ["CMP_CACHE"]
ds = make(local, remote, os.environ.get("CMP_CACHE_LIMIT"))
loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers)
if mode == "resume":
    loader.load_state_dict(json.load(open(state_file)))
read_and_report(loader, remote, local, stop, state_file)
